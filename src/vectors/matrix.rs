//! All section vectors in memory, quantized to i8, for an exact-scan nearest-neighbour search.
//!
//! Vectors are unit length, so cosine similarity is a dot product. Each row keeps i8 codes and
//! its own scale (max |x| / 127): a quarter of the memory of f32 and a quarter of the memory
//! traffic per query, which is what bounds a scan. The quantized score ranks candidates; the
//! caller re-scores the best of them exactly from the stored f32 vectors.

use std::collections::HashMap;

/// Candidates re-scored exactly beyond the ones asked for (quantization can swap close
/// neighbours; it does not move a vector far).
pub const RESCORE_MARGIN: usize = 50;

#[derive(Debug, Default)]
pub struct VectorMatrix {
    dims: usize,
    /// Row → kbid ("" for a free row).
    kbids: Vec<String>,
    rows: HashMap<String, usize>,
    codes: Vec<i8>,
    scales: Vec<f32>,
    free: Vec<usize>,
}

/// Quantize `v` to i8 codes with one scale.
pub fn quantize(v: &[f32], out: &mut [i8]) -> f32 {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        out.iter_mut().for_each(|c| *c = 0);
        return 0.0;
    }
    let scale = max / 127.0;
    for (c, x) in out.iter_mut().zip(v) {
        *c = (x / scale).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    // Written so the compiler vectorizes it (widening multiply-add).
    a.iter()
        .zip(b)
        .map(|(&x, &y)| x as i16 as i32 * y as i16 as i32)
        .sum()
}

impl VectorMatrix {
    pub fn new(dims: usize) -> Self {
        VectorMatrix {
            dims,
            ..Default::default()
        }
    }

    pub fn dimensions(&self) -> usize {
        self.dims
    }

    /// Vectors held.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Bytes of memory the matrix holds (codes, scales and kbids).
    pub fn memory_bytes(&self) -> usize {
        self.codes.len()
            + self.scales.len() * 4
            + self.kbids.iter().map(|k| k.capacity() + 24).sum::<usize>()
            + self.rows.capacity() * 40
    }

    pub fn contains(&self, kbid: &str) -> bool {
        self.rows.contains_key(kbid)
    }

    /// Add or replace the vector of `kbid` (ignored when its length is not the matrix's).
    pub fn upsert(&mut self, kbid: &str, v: &[f32]) {
        if v.len() != self.dims {
            return;
        }
        let row = match self.rows.get(kbid) {
            Some(&r) => r,
            None => {
                let r = match self.free.pop() {
                    Some(r) => r,
                    None => {
                        self.kbids.push(String::new());
                        self.scales.push(0.0);
                        self.codes.resize(self.codes.len() + self.dims, 0);
                        self.kbids.len() - 1
                    }
                };
                self.kbids[r] = kbid.to_string();
                self.rows.insert(kbid.to_string(), r);
                r
            }
        };
        let d = self.dims;
        self.scales[row] = quantize(v, &mut self.codes[row * d..(row + 1) * d]);
    }

    pub fn remove(&mut self, kbid: &str) {
        if let Some(r) = self.rows.remove(kbid) {
            self.kbids[r].clear();
            self.scales[r] = 0.0;
            self.free.push(r);
        }
    }

    /// The best `k` rows for `query` by quantized score among the kbids `accept` allows, best
    /// first (ties by kbid), with their approximate cosine similarity.
    pub fn top(
        &self,
        query: &[f32],
        k: usize,
        accept: &mut dyn FnMut(&str) -> bool,
    ) -> Vec<(String, f32)> {
        if query.len() != self.dims || k == 0 || self.rows.is_empty() {
            return Vec::new();
        }
        let mut q = vec![0i8; self.dims];
        let qs = quantize(query, &mut q);
        let mut scored: Vec<(f32, u32)> = Vec::with_capacity(self.rows.len());
        for (row, codes) in self.codes.chunks_exact(self.dims).enumerate() {
            let s = self.scales[row];
            if s == 0.0 && self.kbids[row].is_empty() {
                continue;
            }
            scored.push((dot_i8(codes, &q) as f32 * s * qs, row as u32));
        }
        let order = |a: &(f32, u32), b: &(f32, u32)| {
            b.0.total_cmp(&a.0)
                .then_with(|| self.kbids[a.1 as usize].cmp(&self.kbids[b.1 as usize]))
        };
        // Most queries need only the head: sort a window, widen it when filters reject much.
        let mut out = Vec::with_capacity(k);
        let mut taken = 0;
        let mut window = (k * 4).max(64);
        while out.len() < k && taken < scored.len() {
            let end = window.min(scored.len());
            if end < scored.len() {
                scored[taken..].select_nth_unstable_by(end - taken - 1, order);
            }
            scored[taken..end].sort_by(order);
            for &(score, row) in &scored[taken..end] {
                let kbid = &self.kbids[row as usize];
                if accept(kbid) {
                    out.push((kbid.clone(), score));
                    if out.len() == k {
                        break;
                    }
                }
            }
            taken = end;
            window *= 4;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let mut v = v.to_vec();
        crate::embedding::l2_normalize(&mut v);
        v
    }

    #[test]
    fn nearest_first_filters_and_removal() {
        let mut m = VectorMatrix::new(3);
        m.upsert("a", &unit(&[1.0, 0.0, 0.0]));
        m.upsert("b", &unit(&[0.9, 0.1, 0.0]));
        m.upsert("c", &unit(&[0.0, 1.0, 0.0]));
        let q = unit(&[1.0, 0.05, 0.0]);
        let top = m.top(&q, 3, &mut |_| true);
        let names: Vec<&str> = top.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!((top[0].1 - 0.9988).abs() < 0.02, "{}", top[0].1);
        let filtered = m.top(&q, 3, &mut |k| k != "a");
        assert_eq!(filtered[0].0, "b");
        m.remove("a");
        assert_eq!(m.len(), 2);
        assert_eq!(m.top(&q, 1, &mut |_| true)[0].0, "b");
        // A freed row is reused.
        m.upsert("d", &unit(&[1.0, 0.0, 0.0]));
        assert_eq!(m.top(&q, 1, &mut |_| true)[0].0, "d");
        assert_eq!(m.kbids.len(), 3);
    }

    #[test]
    fn many_rows_with_a_selective_filter() {
        let mut m = VectorMatrix::new(4);
        for i in 0..1000 {
            let x = i as f32 / 1000.0;
            m.upsert(&format!("k{i:04}"), &unit(&[1.0 - x, x, 0.1, 0.0]));
        }
        // Only every 97th row passes: the window must widen to find 5 of them.
        let top = m.top(&unit(&[1.0, 0.0, 0.1, 0.0]), 5, &mut |k| {
            k[1..].parse::<u32>().unwrap() % 97 == 0
        });
        let names: Vec<&str> = top.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["k0000", "k0097", "k0194", "k0291", "k0388"]);
    }
}
