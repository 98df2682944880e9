//! Running a query: model filter, conditions, sort (stable, missing values last), paging and
//! method.

use std::cmp::Ordering;

use serde_json::{Number, Value};

use super::condition::Condition;
use super::eval::{eq_ignore_case, num_cmp, total_cmp, type_rank};
use super::path::Doc;
use super::spec::{Method, QuerySpec, SortKey};

/// The result of [`run`]: references to the documents given (JSON views by default).
#[derive(Debug, Clone, PartialEq)]
pub enum QueryOutcome<'a, D: ?Sized = Value> {
    /// `method: count`: the number of matching views.
    Count(usize),
    /// The selected views, in order (0 or 1 for `first`/`last`), and how many matched before
    /// `offset`/`limit`.
    Docs {
        docs: Vec<&'a D>,
        total_matched: usize,
    },
}

impl<'a, D: ?Sized> QueryOutcome<'a, D> {
    /// How many views matched the model and conditions (before paging).
    pub fn total_matched(&self) -> usize {
        match self {
            QueryOutcome::Count(n) => *n,
            QueryOutcome::Docs { total_matched, .. } => *total_matched,
        }
    }

    /// The selected views (empty for `Count`).
    pub fn docs(&self) -> &[&'a D] {
        match self {
            QueryOutcome::Count(_) => &[],
            QueryOutcome::Docs { docs, .. } => docs,
        }
    }
}

/// Whether `doc` satisfies every condition (AND; an empty list matches everything).
#[inline]
pub fn matches<D: Doc + ?Sized>(doc: &D, conds: &[Condition]) -> bool {
    let meta = doc.meta();
    conds.iter().all(|c| c.eval(c.path.resolve_in(doc, meta)))
}

/// Runs a query over views given in docid order: model filter, conditions, sort, paging,
/// method.
pub fn run<'a, D: Doc + ?Sized>(
    docs: impl IntoIterator<Item = &'a D>,
    spec: &QuerySpec,
) -> QueryOutcome<'a, D> {
    let model = spec.model.as_deref();
    // One test per document (model, then conditions): a second filter stage costs a call per
    // document.
    let passes = |d: &&'a D| {
        model.is_none_or(|m| {
            d.model()
                .and_then(Value::as_str)
                .is_some_and(|dm| eq_ignore_case(dm, m))
        }) && matches(*d, &spec.conditions)
    };
    order_and_page(docs.into_iter().filter(passes), spec)
}

/// [`run`] over documents already filtered by `spec.model` (the document index does it by
/// comparing model numbers): conditions, sort, paging, method.
pub fn run_of_model<'a, D: Doc + ?Sized>(
    docs: impl IntoIterator<Item = &'a D>,
    spec: &QuerySpec,
) -> QueryOutcome<'a, D> {
    order_and_page(
        docs.into_iter().filter(|d| matches(*d, &spec.conditions)),
        spec,
    )
}

/// Sort, paging and method over the matches.
fn order_and_page<'a, D: Doc + ?Sized>(
    iter: impl Iterator<Item = &'a D>,
    spec: &QuerySpec,
) -> QueryOutcome<'a, D> {
    if spec.method == Method::Count {
        return QueryOutcome::Count(iter.count());
    }
    // The page of `total` matches.
    let page = |total: usize| {
        let start = spec.offset.min(total);
        let end = spec
            .limit
            .map_or(total, |l| start.saturating_add(l).min(total));
        start..end
    };
    let (mut docs, total) = if spec.sort.is_empty() {
        // Input order: keep only the page and count the rest (no list of every match).
        let wanted = page(usize::MAX);
        let mut docs = Vec::new();
        let mut total = 0;
        for d in iter {
            if wanted.contains(&total) {
                docs.push(d);
            }
            total += 1;
        }
        (docs, total)
    } else {
        let mut matched = Vec::with_capacity(iter.size_hint().1.unwrap_or(0));
        matched.extend(iter);
        let total = matched.len();
        let page = page(total);
        if total > 1 {
            matched = sorted(matched, &spec.sort, page.end);
        }
        matched.truncate(page.end);
        matched.drain(..page.start);
        (matched, total)
    };
    match spec.method {
        Method::First => docs.truncate(1),
        Method::Last => {
            let last = docs.pop();
            docs = last.into_iter().collect();
        }
        _ => {}
    }
    QueryOutcome::Docs {
        docs,
        total_matched: total,
    }
}

/// The first `end` of `matched` in sort order (stable: ties keep the input order). Only what
/// the page needs is ordered: a page of 20 out of thousands of matches is selected in linear
/// time, then sorted.
fn sorted<'a, D: Doc + ?Sized>(matched: Vec<&'a D>, keys: &[SortKey], end: usize) -> Vec<&'a D> {
    let Some((first, rest)) = keys.split_first() else {
        return matched;
    };
    // Decorate: the first key inline in each entry, the other keys in a flat table.
    let mut entries: Vec<(SortVal<'a>, usize)> = matched
        .iter()
        .enumerate()
        .map(|(i, v)| (SortVal::of(first.path.resolve(*v)), i))
        .collect();
    let others: Vec<SortVal<'a>> = matched
        .iter()
        .flat_map(|v| {
            rest.iter()
                .map(move |key| SortVal::of(key.path.resolve(*v)))
        })
        .collect();
    let r = rest.len();
    // The input position breaks ties, so the order is total and the unstable sort and
    // selection below give exactly the stable order.
    let cmp = |(a, i): &(SortVal<'a>, usize), (b, j): &(SortVal<'a>, usize)| {
        a.cmp_directed(b, first.descending)
            .then_with(|| {
                rest.iter()
                    .enumerate()
                    .map(|(s, key)| {
                        others[i * r + s].cmp_directed(&others[j * r + s], key.descending)
                    })
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            })
            .then(i.cmp(j))
    };
    if end == 0 {
        return Vec::new();
    }
    if end < entries.len() {
        entries.select_nth_unstable_by(end - 1, cmp);
        entries.truncate(end);
    }
    entries.sort_unstable_by(cmp);
    entries.into_iter().map(|(_, i)| matched[i]).collect()
}

/// A sort value decorated so that most comparisons need no pointer chasing: numbers carry
/// their `f64`, strings their first 16 bytes (big-endian, zero-padded); the full value is
/// compared only on a tie.
#[derive(Clone, Copy)]
enum SortVal<'v> {
    Num(f64, &'v Number),
    Str(u128, &'v str),
    Bool(bool),
    Other(&'v Value),
    Missing,
}

impl<'v> SortVal<'v> {
    fn of(v: Option<&'v Value>) -> SortVal<'v> {
        match v {
            None | Some(Value::Null) => SortVal::Missing,
            Some(Value::Number(n)) => SortVal::Num(n.as_f64().unwrap_or(0.0), n),
            Some(Value::String(s)) => {
                let mut buf = [0u8; 16];
                let n = s.len().min(16);
                buf[..n].copy_from_slice(&s.as_bytes()[..n]);
                SortVal::Str(u128::from_be_bytes(buf), s)
            }
            Some(Value::Bool(b)) => SortVal::Bool(*b),
            Some(other) => SortVal::Other(other),
        }
    }

    fn rank(&self) -> u8 {
        match self {
            SortVal::Num(..) => 0,
            SortVal::Str(..) => 1,
            SortVal::Bool(_) => 2,
            SortVal::Other(v) => type_rank(v),
            SortVal::Missing => 6,
        }
    }

    /// Missing values last whatever the direction; present values in [`total_cmp`] order,
    /// reversed when descending.
    fn cmp_directed(&self, other: &SortVal<'v>, descending: bool) -> Ordering {
        let o = match (self, other) {
            (SortVal::Missing, SortVal::Missing) => return Ordering::Equal,
            (SortVal::Missing, _) => return Ordering::Greater,
            (_, SortVal::Missing) => return Ordering::Less,
            // f64 order agrees with the exact order when the f64s differ.
            (SortVal::Num(x, p), SortVal::Num(y, q)) => match x.partial_cmp(y) {
                Some(o) if o.is_ne() => o,
                _ => num_cmp(p, q),
            },
            // Prefix order agrees with byte order when the prefixes differ.
            (SortVal::Str(x, p), SortVal::Str(y, q)) => x.cmp(y).then_with(|| p.cmp(q)),
            (SortVal::Bool(x), SortVal::Bool(y)) => x.cmp(y),
            (SortVal::Other(x), SortVal::Other(y)) => total_cmp(x, y),
            _ => self.rank().cmp(&other.rank()),
        };
        if descending { o.reverse() } else { o }
    }
}
