//! From a plan to a query let in, before any data is read: the
//! aggregations a rollup serves, the selectors resolved to series, the
//! width of the slots each window reads, and the query's cost checked
//! against the limits and its memory reserved from the read budget.

use std::sync::Arc;

use super::budget::{
    check, check_chunk, chunk_bytes, chunk_steps, cost, Inputs, BYTES_PER_ANSWER_POINT,
    BYTES_PER_SERIES,
};
use super::plan::{Mods, Node, Plan};
use super::range_fns::RangeFn;
use super::rollup::{self, RollupRead};
use super::select::{self, Context, Selected};
use super::value::EvalResult;
use super::Request;
use crate::query::Reservation;

/// What evaluating a planned query reads, and what it was let in with.
pub struct Prepared {
    /// Per selector, its series; empty where a rollup serves it.
    pub selected: Vec<Arc<Vec<Selected>>>,
    /// Per aggregation, the rollup serving it, if one does.
    pub rollups: Vec<Option<RollupRead>>,
    /// Per selector, whether hour and day slots may serve its windows.
    pub wide: Vec<bool>,
    /// Evaluation times: 1 for an instant query.
    pub steps: u64,
    pub admitted: Admitted,
    /// Rollup groups read, in order of first use.
    pub rollup_groups: Vec<String>,
}

/// Resolves, sizes and admits `plan`: refuses it before reading anything
/// when it is over a limit.
pub async fn prepare(ctx: Context<'_>, plan: &Plan, req: &Request) -> EvalResult<Prepared> {
    let (rollups, served) = rollup::plan_rollups(ctx, plan).await?;
    let mut selected = Vec::with_capacity(plan.selectors.len());
    for (spec, served) in plan.selectors.iter().zip(&served) {
        selected.push(Arc::new(if *served {
            Vec::new()
        } else {
            select::resolve(ctx, spec).await?
        }));
    }
    let steps: u64 = if req.step_ms == 0 {
        1
    } else {
        ((req.end_ms - req.start_ms) / req.step_ms + 1) as u64
    };
    let wide = wide_windows(ctx, plan, &selected).await?;
    let width_ms = slot_widths(plan, &wide, req);
    let selector_series: Vec<usize> = selected.iter().map(|s| s.len()).collect();
    let rollup_series: Vec<Option<usize>> = rollups
        .iter()
        .map(|r| r.as_ref().map(|r| r.series.len()))
        .collect();
    let inputs = Inputs {
        selector_series: &selector_series,
        rollup_series: &rollup_series,
        width_ms: &width_ms,
        lookback_ms: req.lookback_ms,
    };
    let admitted = admit(ctx, plan, &inputs, req, steps).await?;
    let mut rollup_groups: Vec<String> = Vec::new();
    for r in rollups.iter().flatten() {
        if !rollup_groups.contains(&r.group) {
            rollup_groups.push(r.group.clone());
        }
    }
    Ok(Prepared {
        selected,
        rollups,
        wide,
        steps,
        admitted,
        rollup_groups,
    })
}

/// A query let in: its chunk size and its share of the read budget.
pub struct Admitted {
    pub chunk: u64,
    /// Of the reservation, what the chunk's intermediate results hold.
    pub held_bytes: u64,
    /// Of the reservation, what the answer may hold.
    pub answer_bytes: u64,
    pub reserved: Reservation,
}

/// Checks the query's cost against the limits, sizes its chunks so that
/// what each holds fits its share of the budget and
/// `query.max_total_points`, and reserves their memory (and the
/// answer's) from the read budget.
async fn admit(
    ctx: Context<'_>,
    plan: &Plan,
    inputs: &Inputs<'_>,
    req: &Request,
    steps: u64,
) -> EvalResult<Admitted> {
    let limits = ctx.engine.limits();
    let total = cost(plan, inputs, steps, req.end_ms - req.start_ms);
    check(&total, limits)?;
    let chunk = chunk_steps(
        plan,
        inputs,
        steps,
        req.step_ms.max(1),
        (chunk_bytes(limits), limits.max_total_points as u64),
    );
    let chunk_cost = cost(
        plan,
        inputs,
        chunk,
        (chunk as i64 - 1).saturating_mul(req.step_ms),
    );
    check_chunk(&chunk_cost, chunk, limits)?;
    // The answer holds at most the series present at a step, each step,
    // and no more series than points (count_values may make one a point).
    let points = total
        .answer_live
        .saturating_mul(steps)
        .min(limits.max_total_points as u64);
    let answer_bytes = points
        .saturating_mul(BYTES_PER_ANSWER_POINT)
        .saturating_add(
            total
                .answer_series
                .min(points)
                .saturating_mul(BYTES_PER_SERIES),
        );
    // A query estimated at more than the whole budget runs alone with all
    // of it; what it was given is what its answer may hold, besides its
    // chunks (at most their share, unless one step alone reads more).
    let reserved = ctx
        .engine
        .reserve(chunk_cost.bytes().saturating_add(answer_bytes))
        .await?;
    let chunks = chunk_cost.bytes().min(chunk_bytes(limits));
    Ok(Admitted {
        chunk,
        held_bytes: chunk_cost.held_bytes(),
        answer_bytes: reserved.bytes().saturating_sub(chunks).min(answer_bytes),
        reserved,
    })
}

/// Per selector, the width of the slots its windows read: an hour or a day
/// where those tile every window and the function reads merged slots, else
/// a minute.
fn slot_widths(plan: &Plan, wide: &[bool], req: &Request) -> Vec<i64> {
    (0..plan.selectors.len())
        .map(|i| match (wide[i], matrix_of(plan, i)) {
            (true, Some((range_ms, mods))) => {
                // A read inside a minute is served by minutes only.
                let at = |t: i64| mods.at(t);
                let mut ends = vec![at(req.start_ms)];
                if req.step_ms > 0 && mods.at_ms.is_none() {
                    ends.push(at(req.start_ms + req.step_ms));
                }
                select::granularity(range_ms, &ends) * 1000
            }
            _ => 60_000,
        })
        .collect()
}

/// Each matrix selector's range function (`absent_over_time` reads as
/// `present_over_time`), where a function reads it.
fn range_fns_of(plan: &Plan) -> Vec<Option<RangeFn>> {
    let mut out = vec![None; plan.selectors.len()];
    for node in plan.root.walk() {
        let Node::Call { func, args } = node else {
            continue;
        };
        let f = match *func {
            "absent_over_time" => Some(RangeFn::Present),
            name => RangeFn::parse(name),
        };
        for a in args {
            if let (Some(f), Node::Matrix { sel, .. }) = (f, a.unwrapped()) {
                out[*sel] = Some(f);
            }
        }
    }
    out
}

/// Per selector, whether hour and day slots may serve its windows.
async fn wide_windows(
    ctx: Context<'_>,
    plan: &Plan,
    selected: &[Arc<Vec<Selected>>],
) -> EvalResult<Vec<bool>> {
    let mut out = Vec::with_capacity(selected.len());
    for (f, sel) in range_fns_of(plan).into_iter().zip(selected) {
        out.push(match f {
            Some(f) => select::merged_slots_serve(ctx, f, sel).await?,
            None => false,
        });
    }
    Ok(out)
}

/// The range and modifiers of matrix selector `sel`.
fn matrix_of(plan: &Plan, sel: usize) -> Option<(i64, Mods)> {
    plan.root.walk().find_map(|node| match node {
        Node::Matrix {
            sel: s,
            range_ms,
            mods,
        } if *s == sel => Some((*range_ms, *mods)),
        _ => None,
    })
}
