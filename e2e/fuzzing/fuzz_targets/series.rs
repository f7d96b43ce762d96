//! The release-series parser (config/src/series.rs): every line of the input, and the whole
//! input, read as a series and as a release; the first four lines as a window's minimum, from
//! and to and a last migrated release. What parses must print and parse back the same, a
//! series' start must belong to it, a window must agree with its definition, and the first two
//! lines' releases must compare as they are equal.
#![no_main]

use std::cmp::Ordering;

use libfuzzer_sys::fuzz_target;
use stagehand_config::{Release, Series, Window};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines: Vec<&str> = text.split('\n').collect();
    for line in lines.iter().copied().chain(std::iter::once(text)) {
        one(line);
    }
    // Ord agrees with Eq (two releases that differ only in build metadata are not Equal),
    // and is antisymmetric.
    if let [a, b, ..] = lines[..]
        && let (Ok(a), Ok(b)) = (Release::parse(a), Release::parse(b))
    {
        assert_eq!(a.cmp(&b) == Ordering::Equal, a == b, "{a} {b}");
        assert_eq!(a.cmp(&b), b.cmp(&a).reverse(), "{a} {b}");
    }
    if let [minimum, from, to, release, ..] = lines[..]
        && let (Ok(minimum), Ok(from), Ok(to), Ok(release)) = (
            Series::parse(minimum),
            Series::parse(from),
            Series::parse(to),
            Release::parse(release),
        )
    {
        let window = Window { minimum, from, to };
        let includes = window.includes(&release);
        assert_eq!(
            includes,
            release >= from.start() && to.covers_up_to(&release),
            "{window:?} {release}"
        );
        if includes {
            assert!(!to.ends_before(&from), "{window:?} includes {release}");
            assert!(from.covers_up_to(&from.start()));
        }
        assert_eq!(
            window.below_minimum(&release),
            release < minimum.start(),
            "{window:?} {release}"
        );
    }
});

fn one(text: &str) {
    if let Ok(series) = Series::parse(text) {
        assert!((1..=3).contains(&series.precision()), "{text:?}");
        let printed = series.to_string();
        assert_eq!(
            Series::parse(&printed),
            Ok(series),
            "{text:?} printed {printed:?}"
        );
        let start = series.start();
        assert!(series.contains(&start), "{series} does not contain {start}");
        assert!(
            series.covers_up_to(&start),
            "{series} does not cover {start}"
        );
        // A series is also a release, the series' start (`v1.18` is `v1.18.0`).
        assert_eq!(Release::parse(text), Ok(start), "{text:?}");
    }
    if let Ok(release) = Release::parse(text) {
        let printed = release.to_string();
        assert_eq!(
            Release::parse(&printed).as_ref(),
            Ok(&release),
            "{text:?} printed {printed:?}"
        );
        assert_eq!(release.cmp(&release), Ordering::Equal);
    }
}
