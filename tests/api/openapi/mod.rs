//! The OpenAPI document cannot drift from the server. The document is checked as a document
//! (`document`); and every route is walked with real requests — its successes and each
//! error it documents — with every answer checked against the document (`walk`: status
//! documented, headers present, body valid against the schema). The requests are rows of
//! data (`routes`), and every answer and header the document lists has a row.

mod bulk;
mod document;
mod routes;
mod walk;
