//! The dashboard's files, compiled in from `dashboards/web/`: hand-written
//! ES modules, one style sheet, the page and its icon. There is no bundler
//! and no third-party code; the browser loads the modules as they are.

use std::sync::LazyLock;

/// One file of the dashboard.
pub(crate) struct Asset {
    pub(crate) name: &'static str,
    pub(crate) content_type: &'static str,
    pub(crate) body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../dashboards/web/",
                $name
            )),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

pub(crate) static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("live.js", JS),
    asset!("chart.js", JS),
    asset!("axes.js", JS),
    asset!("format.js", JS),
    asset!("state.js", JS),
    asset!("fleet.js", JS),
    asset!("explore.js", JS),
    asset!("sourcepage.js", JS),
    asset!("minichart.js", JS),
    asset!("picker.js", JS),
    asset!("series.js", JS),
    asset!("daemon.js", JS),
    asset!("promtext.js", JS),
];

/// Each file's entity tag, by position in [`ASSETS`]: its length and CRC-32.
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| format!("\"{:x}-{:08x}\"", a.body.len(), crc32fast::hash(a.body)))
        .collect()
});

impl Asset {
    pub(crate) fn etag(&self) -> &'static str {
        let i = ASSETS
            .iter()
            .position(|a| std::ptr::eq(a, self))
            .unwrap_or_default();
        ETAGS.get(i).map_or("", String::as_str)
    }
}

/// The file named `name` (no directories: the files are flat).
pub(crate) fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(a: &Asset) -> &str {
        std::str::from_utf8(a.body).unwrap()
    }

    /// Everything the page loads (the page names every module it needs).
    #[test]
    fn the_page_weighs_at_most_150_kb() {
        let total: usize = ASSETS.iter().map(|a| a.body.len()).sum();
        assert!(
            total <= 150 * 1024,
            "the dashboard's files weigh {total} bytes"
        );
    }

    /// The policy forbids inline script and style; the page must not need
    /// them, nor load anything from another host.
    #[test]
    fn no_inline_script_or_style_and_no_other_host() {
        let page = text(find("index.html").unwrap());
        for forbidden in ["<style", " style=", " onclick=", " onload=", "javascript:"] {
            assert!(!page.contains(forbidden), "index.html has {forbidden}");
        }
        for (i, _) in page.match_indices("<script") {
            let tag = &page[i..i + page[i..].find('>').unwrap()];
            assert!(tag.contains(" src="), "inline script in index.html: {tag}");
        }
        for a in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            // SVG's namespace is a name, never fetched: the one URL allowed.
            let js = text(a).replace("'http://www.w3.org/2000/svg'", "");
            for forbidden in [
                "http://",
                "https://",
                "eval(",
                "new Function",
                "innerHTML",
                "setAttribute('style'",
            ] {
                assert!(!js.contains(forbidden), "{} has {forbidden}", a.name);
            }
        }
    }

    /// Every module an import names is compiled in.
    #[test]
    fn every_import_is_served() {
        for a in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            for line in text(a).lines().filter(|l| l.starts_with("import ")) {
                let from = line.rsplit("from ").next().unwrap();
                let name = from.trim_matches(|c| c == '\'' || c == '"' || c == ';' || c == ' ');
                let name = name.trim_start_matches("./");
                assert!(
                    find(name).is_some(),
                    "{} imports {name}, which is not served",
                    a.name
                );
            }
        }
    }
}
