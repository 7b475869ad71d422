//! Currencies: the ISO 4217 codes a price may be in — a product's own `currency`, or the
//! service's `PRICE_CURRENCY` for products that name none. One list, one check, for both.
//! It knows nothing of feeds or HTTP.

/// The active ISO 4217 codes (the maintenance agency's list one, as published 2026-09-17),
/// funds and precious metals included; withdrawn codes (`BGN`, `HRK`, `ZWL`, …) are not.
const ACTIVE: &str = "\
    AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BHD BIF BMD BND BOB BOV BRL BSD BTN BWP \
    BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN \
    ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK \
    JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD \
    MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP \
    PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP \
    SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD USN UYI UYU UYW UZS VED VES VND VUV \
    WST XAD XAF XAG XAU XBA XBB XBC XBD XCD XCG XDR XOF XPD XPF XPT XSU XTS XUA XXX YER ZAR \
    ZMW ZWG";

/// What a currency must be, in words for the one who wrote it.
pub const CURRENCY_RULE: &str = "an active ISO 4217 code in capitals, e.g. EUR, USD, GBP";

/// Whether `code` is an active ISO 4217 code, written as the standard writes it (capitals).
pub fn is_currency(code: &str) -> bool {
    code.len() == 3 && ACTIVE.split_ascii_whitespace().any(|c| c == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_active_iso_4217_codes_in_capitals_are_currencies() {
        for code in ["EUR", "USD", "GBP", "JPY", "CHF", "XCG", "ZWG", "XXX"] {
            assert!(is_currency(code), "{code}");
        }
        for code in [
            "eur", "Eur", "EURO", "EU", "", "ZZZ", "ABC", "BGN", "HRK", "DEM", " EUR", "978",
        ] {
            assert!(!is_currency(code), "{code:?}");
        }
        let codes: Vec<&str> = ACTIVE.split_ascii_whitespace().collect();
        assert!(codes
            .iter()
            .all(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_uppercase())));
        assert!(codes.windows(2).all(|w| w[0] < w[1]), "sorted, each once");
    }
}
