# Each failing test's first panics, from `cargo test`'s output: the test's name, then up to
# PANICS panics printed while it ran (its own assertion, or a job that panicked first), each
# cut to LINES lines and before its backtrace. Used by scripts/test.sh once the suite failed.
BEGIN { PANICS = 2; LINES = 8 }
/^---- .* stdout ----$/ { name = $2; panics = 0; keep = 0; print "-- " name; next }
/^failures:$/ { name = ""; keep = 0; next }
name == "" { next }
/^thread '.*panicked at / {
  panics++
  keep = (panics <= PANICS) ? LINES : 0
}
/^stack backtrace:$/ || /^note: / { keep = 0 }
keep > 0 { print "   " $0; keep-- }
