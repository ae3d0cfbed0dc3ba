//! From PromQL text to the tree the evaluator walks.
//!
//! `promql-parser` parses and type-checks; the builder bounds the query's
//! size first (see `limits`), then rewrites the syntax tree into [`Node`]s
//! with everything the evaluation needs settled once: `@ start()` and
//! `@ end()` as times, offsets and ranges in milliseconds, a matrix
//! selector's range rounded to whole minutes, selectors numbered so they
//! can be resolved to series (and costed) before any data is read, and
//! step-invariant subtrees marked so they are evaluated once rather than
//! at every step (as Prometheus does).
//!
//! | file           | concept |
//! |----------------|---------|
//! | `node.rs`      | the tree's nodes and operators; `children()` and the walk every pass uses |
//! | `build.rs`     | from the syntax tree to nodes: limits, modifiers, ranges, selectors |
//! | `invariant.rs` | marking the step-invariant subtrees |

mod build;
mod invariant;
mod node;

pub use build::plan;
// Named by `select`'s docs, and by the tests.
#[allow(unused_imports)]
pub use build::round_range_ms;
pub use node::{AggOp, BinOp, Card, Grouping, Matching, Mods, Node, Plan, SelectorSpec, Ty};

#[cfg(test)]
mod tests;
