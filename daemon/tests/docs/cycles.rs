//! Import cycles between files. The module tree is walked from the crate
//! root through its `mod` declarations (`#[path]` and inline modules
//! included). In each file, every path that starts with `crate::`,
//! `super::`, `self::` or a child module's name, in a `use` or in the code,
//! is an edge to the file of the deepest module it names. A module's use of
//! its own descendants is not an edge: a module's face may re-export and
//! drive its parts, and the parts may use what their parent defines, as
//! long as no two parts, or no part and another module, depend on each
//! other both ways. Comments, strings and character literals are skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type ModPath = Vec<String>;

/// File to files, each with the path that makes the edge.
type Edges = BTreeMap<PathBuf, BTreeSet<(PathBuf, String)>>;

/// Every problem: one line per cycle, naming its files and the paths that
/// tie them.
pub fn check(root: &Path, crate_root: &Path) -> Vec<String> {
    let mut tree = Tree::default();
    tree.walk(crate_root, Vec::new());
    let edges = tree.edges();
    let rel = |f: &PathBuf| f.strip_prefix(root).unwrap_or(f).display().to_string();
    strongly_connected(&edges)
        .into_iter()
        .map(|cycle| {
            let mut why = Vec::new();
            for a in &cycle {
                for (b, path) in edges.get(a).into_iter().flatten() {
                    if cycle.contains(b) {
                        why.push(format!("{} -> {} ({path})", rel(a), rel(b)));
                    }
                }
            }
            format!(
                "import cycle between {}: {}",
                cycle.iter().map(rel).collect::<Vec<_>>().join(", "),
                why.join("; ")
            )
        })
        .collect()
}

#[derive(Default)]
struct Tree {
    /// The file each module is written in (an inline module: its file's).
    files: BTreeMap<ModPath, PathBuf>,
    children: BTreeMap<ModPath, BTreeSet<String>>,
    /// The modules whose own file each file is.
    file_modules: BTreeMap<PathBuf, ModPath>,
}

impl Tree {
    fn walk(&mut self, file: &Path, module: ModPath) {
        self.files.insert(module.clone(), file.to_path_buf());
        self.file_modules.insert(file.to_path_buf(), module.clone());
        let Ok(text) = std::fs::read_to_string(file) else {
            return;
        };
        let toks = tokens(&text);
        let dir = file.parent().expect("a file is in a folder");
        let name = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let mod_dir = if matches!(name, "mod" | "lib" | "main") {
            dir.to_path_buf()
        } else {
            dir.join(name)
        };
        let mut inline: Vec<(usize, String)> = Vec::new();
        let mut depth = 0usize;
        let mut path_attr: Option<String> = None;
        let mut i = 0;
        while i < toks.len() {
            match toks[i].as_str() {
                "{" => depth += 1,
                "}" => {
                    depth = depth.saturating_sub(1);
                    if inline.last().is_some_and(|(d, _)| *d == depth) {
                        inline.pop();
                    }
                }
                "#" if toks.get(i + 2).is_some_and(|t| t == "path") => {
                    path_attr = toks
                        .get(i + 4)
                        .and_then(|t| t.strip_prefix('"'))
                        .map(|t| t.trim_end_matches('"').to_string());
                }
                "mod" if toks.get(i + 1).is_some_and(|t| is_ident(t)) => {
                    let child = toks[i + 1].clone();
                    let mut scope = module.clone();
                    scope.extend(inline.iter().map(|(_, n)| n.clone()));
                    self.children
                        .entry(scope.clone())
                        .or_default()
                        .insert(child.clone());
                    let mut path = scope;
                    path.push(child.clone());
                    match toks.get(i + 2).map(String::as_str) {
                        Some("{") => {
                            self.files.insert(path, file.to_path_buf());
                            inline.push((depth, child));
                        }
                        Some(";") => {
                            let sub = inline.iter().fold(mod_dir.clone(), |d, (_, n)| d.join(n));
                            let found = match path_attr.take() {
                                Some(p) => Some(dir.join(p)),
                                None => [
                                    sub.join(format!("{child}.rs")),
                                    sub.join(&child).join("mod.rs"),
                                ]
                                .into_iter()
                                .find(|c| c.exists()),
                            };
                            if let Some(f) = found {
                                self.walk(&f, path);
                            }
                        }
                        _ => {}
                    }
                    path_attr = None;
                }
                _ => {}
            }
            i += 1;
        }
    }

    fn edges(&self) -> Edges {
        let mut edges = Edges::new();
        for (file, module) in &self.file_modules {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            for (scope, path) in paths(&tokens(&text), module) {
                let Some(target) = self.resolve(&scope, &path) else {
                    continue;
                };
                if target.starts_with(module) {
                    continue; // its own module or a descendant
                }
                let Some(to) = self.files.get(&target) else {
                    continue; // declared, but its file is not there (cfg'd out)
                };
                if to != file {
                    edges
                        .entry(file.clone())
                        .or_default()
                        .insert((to.clone(), path.join("::")));
                }
            }
        }
        edges
    }

    /// The deepest module `path`, written in module `scope`, names.
    fn resolve(&self, scope: &[String], path: &[String]) -> Option<ModPath> {
        let (mut at, rest): (ModPath, &[String]) = match path.first()?.as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (scope.to_vec(), &path[1..]),
            "super" => {
                let supers = path.iter().take_while(|s| *s == "super").count();
                (
                    scope[..scope.len().checked_sub(supers)?].to_vec(),
                    &path[supers..],
                )
            }
            first if self.is_child(scope, first) => (scope.to_vec(), path),
            _ => return None,
        };
        for segment in rest {
            if !self.is_child(&at, segment) {
                break;
            }
            at.push(segment.clone());
        }
        Some(at)
    }

    fn is_child(&self, module: &[String], name: &str) -> bool {
        self.children.get(module).is_some_and(|c| c.contains(name))
    }
}

fn is_ident(t: &str) -> bool {
    t.starts_with(|c: char| c.is_alphabetic() || c == '_')
}

/// The module paths a file's code writes, each with the module (the
/// file's, or an inline module in it) it is written in: every leg of a
/// `use` tree, and every `a::b::c` elsewhere.
fn paths(toks: &[String], module: &[String]) -> Vec<(ModPath, ModPath)> {
    let mut out = Vec::new();
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let scope = || {
            let mut s = module.to_vec();
            s.extend(inline.iter().map(|(_, n)| n.clone()));
            s
        };
        match toks[i].as_str() {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(d, _)| *d == depth) {
                    inline.pop();
                }
            }
            "mod" if toks.get(i + 2).is_some_and(|t| t == "{") => {
                inline.push((depth, toks[i + 1].clone()));
                depth += 1;
                i += 3;
                continue;
            }
            "use" => {
                let s = scope();
                let mut legs = Vec::new();
                i = use_tree(toks, i + 1, Vec::new(), &mut legs);
                out.extend(legs.into_iter().map(|l| (s.clone(), l)));
                continue;
            }
            t if is_ident(t)
                && toks.get(i + 1).is_some_and(|n| n == "::")
                && (i == 0 || toks[i - 1] != "::") =>
            {
                let mut path = vec![t.to_string()];
                let mut j = i + 1;
                while toks.get(j).is_some_and(|t| t == "::")
                    && toks.get(j + 1).is_some_and(|t| is_ident(t))
                {
                    path.push(toks[j + 1].clone());
                    j += 2;
                }
                out.push((scope(), path));
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Reads the use tree at `toks[i]` into `legs` (one path per leaf, globs
/// ending at their module); returns the index after it.
fn use_tree(toks: &[String], mut i: usize, prefix: ModPath, legs: &mut Vec<ModPath>) -> usize {
    let mut path = prefix;
    while let Some(t) = toks.get(i) {
        match t.as_str() {
            "{" => {
                i += 1;
                while toks.get(i).is_some_and(|t| t != "}") {
                    i = use_tree(toks, i, path.clone(), legs);
                    if toks.get(i).is_some_and(|t| t == ",") {
                        i += 1;
                    }
                }
                return i + 1;
            }
            "*" => {
                legs.push(path);
                return i + 1;
            }
            "::" => i += 1,
            "as" => i += 2,
            "," | "}" | ";" => {
                legs.push(path);
                return i;
            }
            t => {
                path.push(t.to_string());
                i += 1;
            }
        }
    }
    legs.push(path);
    i
}

/// The tokens of Rust source: identifiers, `::`, single punctuation;
/// comments, strings and character literals dropped (a string after a
/// `#[path = …]` kept, quoted, for the module walk).
fn tokens(src: &str) -> Vec<String> {
    let chars: Vec<char> = src.chars().collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i = skip_block_comment(&chars, i);
        } else if c == '"' || ((c == 'r' || c == 'b') && starts_raw_or_byte_string(&chars, i)) {
            let start = i;
            i = skip_string(&chars, i);
            if out.len() >= 2 && out[out.len() - 2] == "path" {
                out.push(chars[start..i].iter().collect());
            }
        } else if c == '\'' {
            i = skip_char_or_lifetime(&chars, i);
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && next == Some(':') {
            out.push("::".into());
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
            i += 1;
        }
    }
    out
}

fn skip_block_comment(chars: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                break;
            }
        } else {
            i += 1;
        }
    }
    i
}

/// `r"`, `r#"`, `b"`, `br"`, `br#"` at `i`, not inside an identifier.
fn starts_raw_or_byte_string(chars: &[char], i: usize) -> bool {
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return false;
    }
    let mut j = i;
    if chars[j] == 'b' {
        j += 1;
    }
    if chars.get(j) == Some(&'r') {
        j += 1;
        while chars.get(j) == Some(&'#') {
            j += 1;
        }
    }
    j > i && chars.get(j) == Some(&'"')
}

fn skip_string(chars: &[char], mut i: usize) -> usize {
    let mut raw = false;
    while chars[i] != '"' {
        raw |= chars[i] == 'r';
        i += 1;
    }
    if raw {
        let hashes = chars[..i].iter().rev().take_while(|c| **c == '#').count();
        i += 1;
        while i < chars.len() {
            if chars[i] == '"'
                && chars[i + 1..].iter().take(hashes).all(|c| *c == '#')
                && chars.len() >= i + 1 + hashes
            {
                return i + 1 + hashes;
            }
            i += 1;
        }
        return i;
    }
    i += 1;
    while i < chars.len() && chars[i] != '"' {
        i += if chars[i] == '\\' { 2 } else { 1 };
    }
    i + 1
}

/// A character literal (`'a'`, `'\n'`, `'\u{1F600}'`) is skipped whole; a
/// lifetime (`'a`) only its quote.
fn skip_char_or_lifetime(chars: &[char], i: usize) -> usize {
    if chars.get(i + 1) == Some(&'\\') {
        let mut j = i + 2;
        while j < chars.len() && chars[j] != '\'' {
            j += 1;
        }
        return j + 1;
    }
    if chars.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    i + 1
}

/// The strongly connected components of more than one file (Tarjan).
fn strongly_connected(edges: &Edges) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        edges: &'a Edges,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a PathBuf) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for (w, _) in s.edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}
