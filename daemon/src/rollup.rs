//! Group rollups: per-group series maintained at ingest, so a fleet-wide
//! graph reads one series instead of fanning out to every source.
//!
//! A group is a set of sources: every source (`all`), the sources matching
//! configured globs, the sources sharing a prefix up to a delimiter
//! (`web-042` joins `web` with delimiter `-`), or the sources whose agents
//! declare the group in their pushes (`SourceBatch.groups`). A group's
//! members are the union of what the configuration and the agents say. For
//! each group and metric
//! the daemon keeps the series `@<group>|<metric>`, whose slots are the
//! slot-wise merge of its members' slots: `n` and `sum` add up, `min` and
//! `max` are the extremes. `@` is outside the source charset, so no agent
//! can write to a rollup series.
//!
//! The merge happens when the flush pipeline drains the aggregator, not per
//! sample: merging slots is associative, so folding each drained (series,
//! minute) slot into its groups gives exactly what folding every sample
//! would, at a cost that follows the active series per flush, and without
//! every ingest thread contending on the few group series. A rollup is
//! therefore fresh to the flush interval, and holds data from the moment
//! its group was configured.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;

use crate::model::{validate_source, EpochMinute, SampleKind, SeriesId, SeriesMinutes, Slot};
use crate::selector::{NameMatcher, SelectorError};

/// The first character of every rollup series' source.
pub const GROUP_PREFIX: char = '@';

/// The group every source belongs to when `rollup.all` is on.
pub const ALL_GROUP: &str = "all";

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RollupConfig {
    /// Keep the `all` group.
    pub all: bool,
    /// Group sources by their prefix up to this character.
    pub prefix_delimiter: Option<char>,
    /// Named groups of sources, each a list of globs.
    pub groups: Vec<GroupRule>,
    /// At most this many rollup series (groups × metrics) are kept; samples
    /// for further ones are left out of the rollups (and counted).
    pub max_series: usize,
    /// Honour the groups agents declare for their sources.
    pub agent_groups: bool,
    /// Distinct group names agents may declare; further names are ignored
    /// (and counted) until idle sources free some.
    pub max_agent_groups: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GroupRule {
    pub name: String,
    /// Source globs (`web-*`); a source in any of them is a member.
    pub sources: Vec<String>,
}

/// Group names one source may declare at once.
pub const MAX_DECLARED_PER_SOURCE: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum RollupError {
    #[error("group name {name:?} {reason}")]
    BadName { name: String, reason: String },
    #[error("group {name:?}: {source}")]
    BadGlob {
        name: String,
        #[source]
        source: SelectorError,
    },
}

/// How a reader's source selection maps to a rollup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInfo {
    pub name: String,
    /// How membership is decided, for listings: `all`, `globs` or `agent`
    /// (declared by agents only).
    pub rule: &'static str,
    pub sources: Vec<String>,
    /// Sources that declared the group themselves, now.
    pub declared_members: usize,
}

/// Who is in a group, for reading its members one by one.
#[derive(Debug, Clone)]
pub struct GroupMembers {
    /// The configured rule (`all`, globs, prefix), if any.
    pub rule: Option<NameMatcher>,
    /// Sources that declared the group, sorted.
    pub declared: Vec<String>,
}

/// One source's declaration.
struct Declaration {
    /// The names as the agent sent them, to tell a repeat from a change.
    sent: Box<[Box<str>]>,
    /// The groups it is in: `sent` less names refused by the bound.
    groups: Groups,
    /// When the source last pushed (Unix s); set under the read lock.
    seen: AtomicI64,
}

/// Group memberships declared by agents.
#[derive(Default)]
struct Declared {
    by_source: HashMap<Box<str>, Declaration>,
    /// Declaring sources per group name; a name is forgotten with its last
    /// member, which frees its place under `max_agent_groups`.
    members: HashMap<Arc<str>, usize>,
}

impl Declared {
    fn leave(&mut self, groups: &Groups) {
        for g in groups.iter() {
            if let Some(n) = self.members.get_mut(g) {
                *n -= 1;
                if *n == 0 {
                    self.members.remove(g);
                }
            }
        }
    }
}

struct Compiled {
    name: String,
    globs: Vec<String>,
    matcher: NameMatcher,
}

/// Group membership and the drain-time merge.
pub struct Rollups {
    cfg: RollupConfig,
    named: Vec<Compiled>,
    /// Each rollup series' kind, fixed by its first member: merging gauges
    /// with counters would be meaningless.
    kinds: Mutex<HashMap<Arc<SeriesId>, SampleKind>>,
    /// Memberships of recently seen sources: glob matching per source per
    /// flush would otherwise cost a regex run per group.
    membership: Mutex<HashMap<Box<str>, Groups>>,
    /// Read-locked on every push of a declaring source (agents repeat
    /// their groups); write-locked only when a membership changes.
    declared: RwLock<Declared>,
    /// Whether any source has ever declared groups, so pushes that declare
    /// none skip the lock while no agent uses the feature.
    any_declared: AtomicBool,
}

/// The group names of one source.
pub type Groups = Arc<[Arc<str>]>;

/// Membership cache entries before it is cleared and rebuilt.
const MEMBERSHIP_CACHE_MAX: usize = 1 << 20;

impl Rollups {
    pub fn new(cfg: RollupConfig) -> Result<Rollups, RollupError> {
        let mut named = Vec::new();
        for g in &cfg.groups {
            if let Err(e) = validate_source(&g.name) {
                return Err(RollupError::BadName {
                    name: g.name.clone(),
                    reason: e.to_string(),
                });
            }
            if g.name == ALL_GROUP || cfg.groups.iter().filter(|o| o.name == g.name).count() > 1 {
                return Err(RollupError::BadName {
                    name: g.name.clone(),
                    reason: "is used twice (`all` is reserved for rollup.all)".into(),
                });
            }
            let matcher = NameMatcher::parse_list(&g.sources.join(",")).map_err(|source| {
                RollupError::BadGlob {
                    name: g.name.clone(),
                    source,
                }
            })?;
            named.push(Compiled {
                name: g.name.clone(),
                globs: g.sources.clone(),
                matcher,
            });
        }
        Ok(Rollups {
            cfg,
            named,
            kinds: Mutex::new(HashMap::new()),
            membership: Mutex::new(HashMap::new()),
            declared: RwLock::new(Declared::default()),
            any_declared: AtomicBool::new(false),
        })
    }

    /// No grouping at all: the drain passes through untouched.
    pub fn disabled() -> Rollups {
        Rollups {
            cfg: RollupConfig::default(),
            named: Vec::new(),
            kinds: Mutex::new(HashMap::new()),
            membership: Mutex::new(HashMap::new()),
            declared: RwLock::new(Declared::default()),
            any_declared: AtomicBool::new(false),
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.cfg.all
            || self.cfg.prefix_delimiter.is_some()
            || !self.named.is_empty()
            || self.cfg.agent_groups
    }

    /// Checks the groups a source declares, before any of its samples are
    /// taken; the error says what is wrong, for the agent's operator.
    pub fn check_declaration(groups: &[String]) -> Result<(), String> {
        if groups.len() > MAX_DECLARED_PER_SOURCE {
            return Err(format!(
                "{} groups declared; at most {MAX_DECLARED_PER_SOURCE} per source",
                groups.len()
            ));
        }
        for g in groups {
            validate_source(g).map_err(|e| format!("group name {g:?} {e}"))?;
        }
        Ok(())
    }

    /// Records the groups `source` declares (checked by
    /// [`Rollups::check_declaration`]) as of `now_s`. An empty list keeps
    /// the source's membership and only marks it as still active. A source
    /// with an invalid name declares nothing: ingest rejects its samples.
    pub fn declare(&self, source: &str, groups: &[String], now_s: i64) {
        if !self.cfg.agent_groups {
            return;
        }
        if groups.is_empty() && !self.any_declared.load(Ordering::Relaxed) {
            return;
        }
        let same = |sent: &[Box<str>]| {
            groups.iter().all(|g| sent.iter().any(|s| **s == **g))
                && sent.iter().all(|s| groups.iter().any(|g| **s == **g))
        };
        {
            let d = self.declared.read();
            match d.by_source.get(source) {
                Some(e) if groups.is_empty() || same(&e.sent) => {
                    e.seen.store(now_s, Ordering::Relaxed);
                    return;
                }
                None if groups.is_empty() => return,
                _ => {}
            }
        }
        // Checked here, on the rare path that changes a membership, rather
        // than on every push.
        if validate_source(source).is_err() {
            return;
        }
        let mut d = self.declared.write();
        if let Some(old) = d.by_source.remove(source) {
            d.leave(&old.groups);
        }
        let mut kept: SmallVec<[Arc<str>; 4]> = SmallVec::new();
        let mut refused = 0u64;
        for g in groups {
            if kept.iter().any(|k| **k == **g) {
                continue;
            }
            let name: Arc<str> = match d.members.get_key_value(g.as_str()) {
                Some((k, _)) => k.clone(),
                None if d.members.len() >= self.cfg.max_agent_groups => {
                    refused += 1;
                    continue;
                }
                None => g.as_str().into(),
            };
            *d.members.entry(name.clone()).or_insert(0) += 1;
            kept.push(name);
        }
        if refused > 0 {
            metrics::counter!("tally_rollup_groups_refused_total").increment(refused);
        }
        // Kept even when every name was refused, so repeats of it stay on
        // the read path.
        d.by_source.insert(
            source.into(),
            Declaration {
                sent: groups.iter().map(|g| g.as_str().into()).collect(),
                groups: kept.into_iter().collect(),
                seen: AtomicI64::new(now_s),
            },
        );
        self.any_declared.store(true, Ordering::Relaxed);
    }

    /// Forgets the declarations of sources silent since before `cutoff_s`;
    /// returns how many.
    pub fn forget_idle(&self, cutoff_s: i64) -> usize {
        let mut d = self.declared.write();
        let idle: Vec<Box<str>> = d
            .by_source
            .iter()
            .filter(|(_, e)| e.seen.load(Ordering::Relaxed) < cutoff_s)
            .map(|(s, _)| s.clone())
            .collect();
        for s in &idle {
            if let Some(e) = d.by_source.remove(s) {
                d.leave(&e.groups);
            }
        }
        idle.len()
    }

    /// The rollup series of `group` for `metric`.
    pub fn series(group: &str, metric: &str) -> SeriesId {
        SeriesId::new(&format!("{GROUP_PREFIX}{group}"), metric)
    }

    pub fn is_rollup_source(source: &str) -> bool {
        source.starts_with(GROUP_PREFIX)
    }

    /// The groups `source` belongs to: configured and declared.
    pub fn groups_of(&self, source: &str) -> Groups {
        let configured = self.configured_groups_of(source);
        let declared = self
            .declared
            .read()
            .by_source
            .get(source)
            .map(|e| e.groups.clone());
        match declared {
            None => configured,
            Some(declared) => configured
                .iter()
                .chain(declared.iter().filter(|g| !configured.contains(g)))
                .cloned()
                .collect(),
        }
    }

    /// The groups the configuration puts `source` in.
    fn configured_groups_of(&self, source: &str) -> Groups {
        let mut cache = self.membership.lock();
        if let Some(g) = cache.get(source) {
            return g.clone();
        }
        let mut groups: SmallVec<[Arc<str>; 4]> = SmallVec::new();
        if self.cfg.all {
            groups.push(ALL_GROUP.into());
        }
        if let Some(d) = self.cfg.prefix_delimiter {
            if let Some((prefix, _)) = source.split_once(d) {
                // A named group owns its name: its globs alone decide who
                // is in it, so its rollup and its fan-out agree.
                let named = self.named.iter().any(|g| g.name == prefix);
                if !prefix.is_empty() && !named && !groups.iter().any(|g| &**g == prefix) {
                    groups.push(prefix.into());
                }
            }
        }
        for g in &self.named {
            if g.matcher.matches(source) && !groups.iter().any(|n| **n == *g.name) {
                groups.push(g.name.as_str().into());
            }
        }
        let groups: Groups = groups.into_iter().collect();
        if cache.len() >= MEMBERSHIP_CACHE_MAX {
            cache.clear();
        }
        cache.insert(source.into(), groups.clone());
        groups
    }

    /// The members of `group`, for fanning out; None for a group neither
    /// the configuration nor any agent defines.
    pub fn members(&self, group: &str) -> Option<GroupMembers> {
        let rule = self.member_matcher(group);
        let mut declared: Vec<String> = {
            let d = self.declared.read();
            if !d.members.contains_key(group) {
                Vec::new()
            } else {
                d.by_source
                    .iter()
                    .filter(|(_, e)| e.groups.iter().any(|g| &**g == group))
                    .map(|(s, _)| s.to_string())
                    .collect()
            }
        };
        if rule.is_none() && declared.is_empty() {
            return None;
        }
        declared.sort_unstable();
        Some(GroupMembers { rule, declared })
    }

    /// The configured members of `group` as a source matcher.
    fn member_matcher(&self, group: &str) -> Option<NameMatcher> {
        if self.cfg.all && group == ALL_GROUP {
            return Some(NameMatcher::any());
        }
        if let Some(g) = self.named.iter().find(|g| g.name == group) {
            return Some(g.matcher.clone());
        }
        let d = self.cfg.prefix_delimiter?;
        if group.contains(d) || validate_source(group).is_err() {
            return None;
        }
        let escaped = format!(
            "{}{}.*",
            regex::escape(group),
            regex::escape(&d.to_string())
        );
        NameMatcher::new(crate::selector::MatchOp::Regex, &escaped).ok()
    }

    /// The group whose members are exactly the sources `source` accepts, if
    /// any: a reader selecting every source reads the `all` rollup, one
    /// selecting `web-*` reads a group defined as `web-*`.
    pub fn group_for(&self, source: &NameMatcher) -> Option<&str> {
        if source.is_any() {
            return self.cfg.all.then_some(ALL_GROUP);
        }
        self.named
            .iter()
            .find(|g| g.matcher == *source)
            .map(|g| g.name.as_str())
    }

    /// The configured groups and those agents declare now, for listings
    /// (prefix groups are implicit: see [`Rollups::prefix_delimiter`]).
    pub fn listed(&self) -> Vec<GroupInfo> {
        let declared: BTreeMap<String, usize> = self
            .declared
            .read()
            .members
            .iter()
            .map(|(g, n)| (g.to_string(), *n))
            .collect();
        let count = |name: &str| declared.get(name).copied().unwrap_or(0);
        let mut out = Vec::new();
        if self.cfg.all {
            out.push(GroupInfo {
                name: ALL_GROUP.into(),
                rule: "all",
                sources: vec!["*".into()],
                declared_members: count(ALL_GROUP),
            });
        }
        for g in &self.named {
            out.push(GroupInfo {
                name: g.name.clone(),
                rule: "globs",
                sources: g.globs.clone(),
                declared_members: count(&g.name),
            });
        }
        for (name, n) in &declared {
            if !out.iter().any(|g| g.name == *name) {
                out.push(GroupInfo {
                    name: name.clone(),
                    rule: "agent",
                    sources: Vec::new(),
                    declared_members: *n,
                });
            }
        }
        out
    }

    pub fn prefix_delimiter(&self) -> Option<char> {
        self.cfg.prefix_delimiter
    }

    /// Adds the rollup series of a drained batch to it.
    pub fn expand(&self, mut drained: Vec<SeriesMinutes>) -> Vec<SeriesMinutes> {
        if !self.is_enabled() {
            return drained;
        }
        let mut acc: HashMap<SeriesId, (SampleKind, BTreeMap<EpochMinute, Slot>)> = HashMap::new();
        let mut skipped = 0u64;
        {
            let mut kinds = self.kinds.lock();
            for member in &drained {
                if Rollups::is_rollup_source(&member.series.source) {
                    continue;
                }
                // Counters are stored as deltas whatever the agent sent.
                let kind = match member.kind {
                    SampleKind::Gauge => SampleKind::Gauge,
                    _ => SampleKind::DeltaCounter,
                };
                for group in self.groups_of(&member.series.source).iter() {
                    let id = Rollups::series(group, &member.series.metric);
                    let known = match kinds.get(&id) {
                        Some(k) => *k,
                        None if kinds.len() >= self.cfg.max_series => {
                            skipped += 1;
                            continue;
                        }
                        None => {
                            kinds.insert(Arc::new(id.clone()), kind);
                            kind
                        }
                    };
                    if known != kind {
                        skipped += 1;
                        continue;
                    }
                    let (_, minutes) = acc.entry(id).or_insert_with(|| (kind, BTreeMap::new()));
                    for (m, slot) in &member.minutes {
                        minutes.entry(*m).or_default().merge(slot);
                    }
                }
            }
        }
        if skipped > 0 {
            metrics::counter!("tally_rollup_skipped_total").increment(skipped);
        }
        drained.extend(acc.into_iter().map(|(id, (kind, minutes))| SeriesMinutes {
            series: Arc::new(id),
            kind,
            minutes: minutes.into_iter().collect(),
        }));
        drained
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollups() -> Rollups {
        Rollups::new(RollupConfig {
            all: true,
            prefix_delimiter: Some('-'),
            groups: vec![GroupRule {
                name: "edge".into(),
                sources: vec!["web-0*".into(), "cdn*".into()],
            }],
            max_series: 100,
            agent_groups: true,
            max_agent_groups: 3,
        })
        .unwrap()
    }

    fn member(source: &str, metric: &str, kind: SampleKind, m: &[(i64, f64)]) -> SeriesMinutes {
        SeriesMinutes {
            series: Arc::new(SeriesId::new(source, metric)),
            kind,
            minutes: m.iter().map(|(t, v)| (*t, Slot::of(*v))).collect(),
        }
    }

    #[test]
    fn membership() {
        let r = rollups();
        let names =
            |s: &str| -> Vec<String> { r.groups_of(s).iter().map(|g| g.to_string()).collect() };
        assert_eq!(names("web-01"), ["all", "web", "edge"]);
        assert_eq!(names("web-11"), ["all", "web"]);
        assert_eq!(names("cdn7"), ["all", "edge"]);
        // A named group owns its name: no prefix membership in it.
        assert_eq!(names("edge-1"), ["all"]);
        assert!(r.member_matcher("").is_none() && r.member_matcher("a b").is_none());
        for known in ["web", "edge", "all"] {
            assert!(r.member_matcher(known).is_some(), "{known}");
        }
        assert!(r.member_matcher("we-b").is_none());
        let web = r.member_matcher("web").unwrap();
        assert!(web.matches("web-9") && !web.matches("webby-9"));
        assert_eq!(
            r.group_for(&NameMatcher::parse_list("web-0*,cdn*").unwrap()),
            Some("edge")
        );
        assert_eq!(r.group_for(&NameMatcher::any()), Some("all"));
        assert_eq!(r.group_for(&NameMatcher::exact("web-1")), None);
    }

    #[test]
    fn rollup_slots_are_the_merge_of_member_slots() {
        let r = rollups();
        let out = r.expand(vec![
            member("web-01", "cpu", SampleKind::Gauge, &[(10, 1.0), (11, 5.0)]),
            member("web-11", "cpu", SampleKind::Gauge, &[(10, 3.0)]),
            member("db-1", "cpu", SampleKind::Gauge, &[(10, -2.0)]),
        ]);
        let get = |src: &str| {
            out.iter()
                .find(|s| *s.series == Rollups::series(src, "cpu"))
                .map(|s| s.minutes.clone())
        };
        let mut m10 = Slot::of(1.0);
        m10.merge(&Slot::of(3.0));
        m10.merge(&Slot::of(-2.0));
        assert_eq!(get("all").unwrap(), vec![(10, m10), (11, Slot::of(5.0))]);
        let mut web10 = Slot::of(1.0);
        web10.merge(&Slot::of(3.0));
        assert_eq!(get("web").unwrap(), vec![(10, web10), (11, Slot::of(5.0))]);
        assert_eq!(
            get("edge").unwrap(),
            vec![(10, Slot::of(1.0)), (11, Slot::of(5.0))]
        );
        assert_eq!(get("db").unwrap(), vec![(10, Slot::of(-2.0))]);
        assert!(get("cdn").is_none());
    }

    #[test]
    fn kind_conflicts_and_the_series_bound_leave_members_out() {
        let r = Rollups::new(RollupConfig {
            all: true,
            max_series: 1,
            ..RollupConfig::default()
        })
        .unwrap();
        let out = r.expand(vec![
            member("a", "x", SampleKind::CumulativeCounter, &[(1, 2.0)]),
            member("b", "x", SampleKind::Gauge, &[(1, 7.0)]),
            member("a", "y", SampleKind::Gauge, &[(1, 7.0)]),
        ]);
        let rolled: Vec<_> = out
            .iter()
            .filter(|s| Rollups::is_rollup_source(&s.series.source))
            .collect();
        assert_eq!(rolled.len(), 1);
        assert_eq!(rolled[0].kind, SampleKind::DeltaCounter);
        assert_eq!(rolled[0].minutes, vec![(1, Slot::of(2.0))]);
    }

    proptest::proptest! {
        /// Every rollup series is the slot-wise merge of exactly its
        /// members' slots, whatever the batch looks like.
        #[test]
        fn rollups_equal_the_merge_of_their_members(
            members in proptest::collection::vec(
                (0usize..5, 0usize..2, proptest::collection::vec((0i64..4, -50i32..50), 1..4)),
                0..12,
            ),
            declarations in proptest::collection::vec(
                (0usize..5, proptest::collection::vec(0usize..3, 0..3)),
                0..6,
            ),
        ) {
            const SOURCES: [&str; 5] = ["web-01", "web-11", "db-1", "cdn7", "solo"];
            const METRICS: [&str; 2] = ["cpu", "mem"];
            // Declared names overlap a prefix group and a named one.
            const DECLARED: [&str; 3] = ["blue", "web", "edge"];
            let r = rollups();
            // Each source's declared groups: the latest non-empty list.
            let mut declared: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for (s, gs) in &declarations {
                let names: Vec<String> = gs.iter().map(|g| DECLARED[*g].to_string()).collect();
                r.declare(SOURCES[*s], &names, 0);
                if !names.is_empty() {
                    let mut names: Vec<&str> = gs.iter().map(|g| DECLARED[*g]).collect();
                    names.dedup();
                    declared.insert(SOURCES[*s], names);
                }
            }
            // Membership as the configuration alone gives it, plus the declarations.
            let configured = rollups();
            let groups_of = |source: &str| -> Vec<String> {
                let mut g: Vec<String> =
                    configured.groups_of(source).iter().map(|g| g.to_string()).collect();
                for d in declared.get(source).into_iter().flatten() {
                    if !g.iter().any(|x| x == d) {
                        g.push(d.to_string());
                    }
                }
                g
            };
            let drained: Vec<SeriesMinutes> = members
                .iter()
                .map(|(s, m, mins)| {
                    let mut by_minute: BTreeMap<i64, Slot> = BTreeMap::new();
                    for (t, v) in mins {
                        by_minute.entry(*t).or_default().add(*v as f64);
                    }
                    SeriesMinutes {
                        series: Arc::new(SeriesId::new(SOURCES[*s], METRICS[*m])),
                        kind: SampleKind::Gauge,
                        minutes: by_minute.into_iter().collect(),
                    }
                })
                .collect();
            let out = r.expand(drained.clone());
            proptest::prop_assert_eq!(&out[..drained.len()], &drained[..], "members pass through");
            let mut want: BTreeMap<SeriesId, BTreeMap<i64, Slot>> = BTreeMap::new();
            for m in &drained {
                for g in groups_of(&m.series.source) {
                    let slots = want.entry(Rollups::series(&g, &m.series.metric)).or_default();
                    for (t, s) in &m.minutes {
                        slots.entry(*t).or_default().merge(s);
                    }
                }
            }
            let got: BTreeMap<SeriesId, BTreeMap<i64, Slot>> = out[drained.len()..]
                .iter()
                .map(|s| ((*s.series).clone(), s.minutes.iter().copied().collect()))
                .collect();
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn agents_declare_groups_within_bounds() {
        let r = rollups();
        let names =
            |s: &str| -> Vec<String> { r.groups_of(s).iter().map(|g| g.to_string()).collect() };
        let list = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
        r.declare("db-1", &list(&["blue", "edge", "blue"]), 100);
        assert_eq!(names("db-1"), ["all", "db", "blue", "edge"]);
        // An empty list keeps the membership.
        r.declare("db-1", &[], 200);
        assert_eq!(names("db-1"), ["all", "db", "blue", "edge"]);
        // A new list replaces it.
        r.declare("db-1", &list(&["green"]), 200);
        assert_eq!(names("db-1"), ["all", "db", "green"]);
        r.declare("web-01", &list(&["green", "red"]), 300);
        // The cap is 3 distinct names: "blue" left with db-1, so "amber" fits; "pink" does not.
        r.declare("cdn7", &list(&["amber", "pink"]), 300);
        assert_eq!(names("cdn7"), ["all", "edge", "amber"]);

        // Members: the configured rule (here the prefix rule, which every
        // name has) and the declarations together.
        let green = r.members("green").unwrap();
        assert!(green
            .rule
            .is_some_and(|m| m.matches("green-1") && !m.matches("db-1")));
        assert_eq!(green.declared, ["db-1", "web-01"]);
        let edge = r.members("edge").unwrap();
        assert!(edge.rule.is_some() && edge.declared.is_empty());
        assert!(r.members("pink").unwrap().declared.is_empty());
        assert!(r.members("blue").unwrap().declared.is_empty());
        let listed: Vec<(String, &str, usize)> = r
            .listed()
            .into_iter()
            .map(|g| (g.name, g.rule, g.declared_members))
            .collect();
        assert_eq!(
            listed,
            [
                ("all".to_string(), "all", 0),
                ("edge".to_string(), "globs", 0),
                ("amber".to_string(), "agent", 1),
                ("green".to_string(), "agent", 2),
                ("red".to_string(), "agent", 1),
            ]
        );

        // Rollups for declared groups.
        let out = r.expand(vec![
            member("db-1", "cpu", SampleKind::Gauge, &[(10, 1.0)]),
            member("web-01", "cpu", SampleKind::Gauge, &[(10, 4.0)]),
        ]);
        let green_cpu = out
            .iter()
            .find(|s| *s.series == Rollups::series("green", "cpu"))
            .unwrap();
        let mut want = Slot::of(1.0);
        want.merge(&Slot::of(4.0));
        assert_eq!(green_cpu.minutes, vec![(10, want)]);

        // Sources silent since before the cutoff are forgotten, with their
        // groups once no member is left.
        assert_eq!(r.forget_idle(250), 1);
        assert_eq!(r.members("green").unwrap().declared, ["web-01"]);
        assert_eq!(names("db-1"), ["all", "db"]);
        assert_eq!(r.forget_idle(1_000), 2);
        assert!(r.listed().iter().all(|g| g.rule != "agent"));
    }

    #[test]
    fn declarations_are_checked_and_can_be_turned_off() {
        let list = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
        assert!(Rollups::check_declaration(&list(&["blue", "eu-west-1", "a.b:c"])).is_ok());
        for bad in [&["bad name"][..], &[""], &["@all"], &["x/y"]] {
            let e = Rollups::check_declaration(&list(bad)).unwrap_err();
            assert!(e.contains("group name"), "{e}");
        }
        let nine: Vec<String> = (0..9).map(|i| format!("g{i}")).collect();
        let e = Rollups::check_declaration(&nine).unwrap_err();
        assert!(e.contains("at most 8"), "{e}");

        let off = Rollups::new(RollupConfig {
            all: true,
            max_series: 10,
            ..RollupConfig::default()
        })
        .unwrap();
        off.declare("a", &list(&["blue"]), 0);
        assert_eq!(&*off.groups_of("a"), &[Arc::<str>::from("all")]);
        // Without a prefix rule, a name no one declared is no group.
        assert!(off.members("blue").is_none());
        let on = Rollups::new(RollupConfig {
            agent_groups: true,
            max_agent_groups: 10,
            max_series: 10,
            ..RollupConfig::default()
        })
        .unwrap();
        on.declare("a", &list(&["blue"]), 0);
        let blue = on.members("blue").unwrap();
        assert!(blue.rule.is_none() && blue.declared == ["a"]);
    }

    #[test]
    fn bad_groups_are_refused() {
        let bad = |name: &str, globs: &[&str]| {
            Rollups::new(RollupConfig {
                groups: vec![GroupRule {
                    name: name.into(),
                    sources: globs.iter().map(|s| s.to_string()).collect(),
                }],
                ..RollupConfig::default()
            })
            .is_err()
        };
        assert!(bad("a b", &["x*"]));
        assert!(bad("ok", &[]));
        assert!(bad("all", &["x*"]));
        assert!(!bad("ok", &["x*"]));
    }
}
