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
//! The merge happens when the flush pipeline drains the aggregator
//! (`expand.rs`), not per sample: merging slots is associative, so folding each drained (series,
//! minute) slot into its groups gives exactly what folding every sample
//! would, at a cost that follows the active series per flush, and without
//! every ingest thread contending on the few group series. A rollup is
//! therefore fresh to the flush interval, and holds data from the moment
//! its group was configured.

mod config;
mod expand;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;

use crate::aggregator::{PreallocMarks, PreallocWindow};
use crate::labels::Labels;
use crate::model::{validate_source, DocKey, EpochMinute, SampleKind, SeriesId};
use crate::selector::{NameMatcher, SelectorError};

/// The first character of every rollup series' source.
pub const GROUP_PREFIX: char = '@';

/// Fixed seeds: a rollup series' pre-allocation moment is the same in every
/// daemon writing it, so several daemons ask for its documents together.
static PREALLOC_HASH: ahash::RandomState = ahash::RandomState::with_seeds(7, 11, 13, 17);

/// The group every source belongs to when `rollup.all` is on.
pub const ALL_GROUP: &str = "all";

pub use config::{GroupRule, RollupConfig};

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
    /// `cfg.prefix_delimiter` as the one character it must be.
    prefix: Option<char>,
    named: Vec<Compiled>,
    /// Every rollup series: its kind, fixed by its first member (merging
    /// gauges with counters would be meaningless), and what pre-allocating
    /// its next documents needs.
    kinds: Mutex<HashMap<Arc<SeriesId>, RollupSeries>>,
    /// The label sets of each rollup source's metric (`@group|metric`), as
    /// `kinds` learnt them: what a read of a group's metric reads before
    /// the catalog has them.
    label_sets: RwLock<HashMap<Box<str>, Vec<Labels>>>,
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

/// One rollup series, as the drain-time merge knows it.
#[derive(Debug)]
struct RollupSeries {
    kind: SampleKind,
    /// Latest minute with data, as for an agent's series.
    last_minute: EpochMinute,
    /// Spreads its pre-allocation moment over the period's final window.
    hash: u64,
    prealloc: PreallocMarks,
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
            prefix: cfg.prefix_char(),
            cfg,
            named,
            kinds: Mutex::new(HashMap::new()),
            label_sets: RwLock::new(HashMap::new()),
            membership: Mutex::new(HashMap::new()),
            declared: RwLock::new(Declared::default()),
            any_declared: AtomicBool::new(false),
        })
    }

    /// No grouping at all: the drain passes through untouched.
    pub fn disabled() -> Rollups {
        Rollups {
            cfg: RollupConfig::none(),
            prefix: None,
            named: Vec::new(),
            kinds: Mutex::new(HashMap::new()),
            label_sets: RwLock::new(HashMap::new()),
            membership: Mutex::new(HashMap::new()),
            declared: RwLock::new(Declared::default()),
            any_declared: AtomicBool::new(false),
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.cfg.all || self.prefix.is_some() || !self.named.is_empty() || self.cfg.agent_groups
    }

    /// The rollup series known so far: about how many a flush adds.
    pub fn known_series(&self) -> usize {
        self.kinds.lock().len()
    }

    /// Checks the groups a source declares, before any of its samples are
    /// taken; the error says what is wrong, for the agent's operator.
    pub fn check_declaration<S: AsRef<str>>(groups: &[S]) -> Result<(), String> {
        if groups.len() > MAX_DECLARED_PER_SOURCE {
            return Err(format!(
                "{} groups declared; at most {MAX_DECLARED_PER_SOURCE} per source",
                groups.len()
            ));
        }
        for g in groups.iter().map(AsRef::as_ref) {
            validate_source(g).map_err(|e| format!("group name {g:?} {e}"))?;
        }
        Ok(())
    }

    /// Records the groups `source` declares (checked by
    /// [`Rollups::check_declaration`]) as of `now_s`. An empty list keeps
    /// the source's membership and only marks it as still active. A source
    /// with an invalid name declares nothing: ingest rejects its samples.
    pub fn declare<S: AsRef<str>>(&self, source: &str, groups: &[S], now_s: i64) {
        if !self.cfg.agent_groups {
            return;
        }
        if groups.is_empty() && !self.any_declared.load(Ordering::Relaxed) {
            return;
        }
        let same = |sent: &[Box<str>]| {
            groups
                .iter()
                .all(|g| sent.iter().any(|s| **s == *g.as_ref()))
                && sent
                    .iter()
                    .all(|s| groups.iter().any(|g| **s == *g.as_ref()))
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
        for g in groups.iter().map(AsRef::as_ref) {
            if kept.iter().any(|k| **k == *g) {
                continue;
            }
            let name: Arc<str> = match d.members.get_key_value(g) {
                Some((k, _)) => k.clone(),
                None if d.members.len() >= self.cfg.max_agent_groups => {
                    refused += 1;
                    continue;
                }
                None => g.into(),
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
                sent: groups.iter().map(|g| g.as_ref().into()).collect(),
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

    /// The unlabelled rollup series of `group` for `metric`.
    pub fn series(group: &str, metric: &str) -> SeriesId {
        SeriesId::new(&Rollups::source(group), metric)
    }

    /// The source rollup series of `group` are stored under: `@<group>`.
    pub fn source(group: &str) -> String {
        format!("{GROUP_PREFIX}{group}")
    }

    /// The label sets the rollup source `@<group>` has seen for `metric`
    /// since this daemon started (see `label_sets`).
    pub fn label_sets(&self, rollup_source: &str, metric: &str) -> Vec<Labels> {
        let key = format!("{rollup_source}|{metric}");
        self.label_sets
            .read()
            .get(key.as_str())
            .cloned()
            .unwrap_or_default()
    }

    fn learn_label_set(&self, id: &SeriesId) {
        let key = format!("{}|{}", id.source, id.metric);
        self.label_sets
            .write()
            .entry(key.into_boxed_str())
            .or_default()
            .push(id.labels.clone());
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
        if let Some(d) = self.prefix {
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
        let d = self.prefix?;
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
        self.prefix
    }

    /// The next hour and day documents of rollup series that are due for
    /// pre-allocation now, at most about `limit`: the same rule as for
    /// agents' series ([`PreallocWindow::check`]).
    pub fn due_preallocations(&self, window: &PreallocWindow, limit: usize) -> Vec<DocKey> {
        let mut due = Vec::new();
        let mut kinds = self.kinds.lock();
        for (id, r) in kinds.iter_mut() {
            if due.len() >= limit {
                break;
            }
            if r.last_minute != EpochMinute::MIN {
                window.check(id, r.hash, r.last_minute, &mut r.prealloc, &mut due);
            }
        }
        due
    }
}

#[cfg(test)]
mod tests;
