//! All section vectors in memory, quantized to i8, for an exact-scan nearest-neighbour search.
//!
//! Vectors are unit length, so cosine similarity is a dot product. Each row keeps i8 codes and
//! its own scale (max |x| / 127): a quarter of the memory of f32 and a quarter of the memory
//! traffic per query, which is what bounds a scan. The quantized score ranks candidates; the
//! caller re-scores the best of them exactly from the stored f32 vectors.
//!
//! A scan reads every row, so it is bound by memory traffic. From `NIBBLE_MIN_ROWS` rows on,
//! every row is first scored by 4-bit codes (half the i8 codes' bytes) and only the best few
//! (`NIBBLE_KEEP_PER_RESULT` per wanted result, at least `NIBBLE_KEEP_MIN`) are scored again
//! with the i8 codes. A very large matrix (`PREFILTER_MIN_ROWS`) is instead first ranked by one
//! sign bit per dimension (48 bytes a row at 384 dimensions, an eighth of the i8 codes' memory
//! traffic), scored asymmetrically against the query's 4-bit levels; the best tenth of the rows
//! (never fewer than 20 per wanted result) is then scored with the i8 codes. The true
//! neighbours sit far inside either candidate set, and when a filter leaves too few results
//! among the candidates the whole matrix is scanned with i8 codes, so nothing a filter allows
//! is missed.

use std::collections::HashMap;

/// Candidates re-scored exactly beyond the ones asked for (quantization can swap close
/// neighbours; it does not move a vector far).
pub const RESCORE_MARGIN: usize = 10;

#[derive(Debug, Default)]
pub struct VectorMatrix {
    dims: usize,
    /// Row → kbid ("" for a free row).
    kbids: Vec<String>,
    rows: HashMap<String, usize>,
    codes: Vec<i8>,
    scales: Vec<f32>,
    /// One bit per dimension (set when the component is positive), `words` u64 per row.
    signs: Vec<u64>,
    words: usize,
    /// 4-bit codes, `nibble_bytes()` per row: per 64 dimensions 32 bytes, dimension `j` in the
    /// low nibble of byte `j` and dimension `32 + j` in its high nibble (what one AVX2 load and
    /// two masks turn into two vectors lined up with the query's i8 codes). A code `c` stands for
    /// `(c - 7.5) · nibble_scale`.
    nibbles: Vec<u8>,
    nibble_scales: Vec<f32>,
    free: Vec<usize>,
    /// `PREFILTER_MIN_ROWS` unless set otherwise (tests, measurements).
    prefilter_from: Option<usize>,
    /// `NIBBLE_MIN_ROWS` unless set otherwise (tests, measurements).
    nibble_from: Option<usize>,
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

/// From this many rows on, a scan ranks by sign bits first (instead of 4-bit codes): at a
/// million rows the 4-bit codes are 192 MB to read per query, the sign bits 48 MB.
pub const PREFILTER_MIN_ROWS: usize = 262_144;
/// The sign-bit pass keeps 1 row in this many for the i8 scoring …
const PREFILTER_KEEP_DIVISOR: usize = 10;
/// … and at least this many per wanted result.
const PREFILTER_KEEP_PER_RESULT: usize = 20;

/// From this many rows on, a scan ranks every row by its 4-bit codes first: at 100k × 384 the
/// i8 scan reads 38 MB per query and the 4-bit pass half of that.
pub const NIBBLE_MIN_ROWS: usize = 32_768;
/// The 4-bit pass keeps this many rows per wanted result for the i8 scoring …
const NIBBLE_KEEP_PER_RESULT: usize = 8;
/// … and at least this many.
const NIBBLE_KEEP_MIN: usize = 1024;

/// Quantize `v` to 4-bit codes (`(c - 7.5) · scale`, c in 0..=15) in the nibble layout of
/// `VectorMatrix::nibbles`, into `out` (`dims.div_ceil(64) * 32` bytes).
fn quantize_nibbles(v: &[f32], out: &mut [u8]) -> f32 {
    out.fill(0);
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        // Code 0 everywhere with scale 0: every dot product is 0.
        return 0.0;
    }
    let scale = max / 7.5;
    for (i, x) in v.iter().enumerate() {
        let c = (x / scale + 7.5).round().clamp(0.0, 15.0) as u8;
        let (block, j) = (i / 64, i % 64);
        let byte = &mut out[block * 32 + j % 32];
        *byte |= if j < 32 { c } else { c << 4 };
    }
    scale
}

/// Σ cᵢ·qᵢ of every row of 4-bit `codes` (`bytes` per row) with the query's i8 codes `q`
/// (zero-padded to `bytes * 2`), into `out`.
fn nibble_dots(codes: &[u8], bytes: usize, q: &[i8], out: &mut Vec<i32>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && bytes.is_multiple_of(32) {
        // SAFETY: the CPU supports AVX2 (checked just above).
        unsafe { avx2::nibble_dots(codes, bytes, q, out) };
        return;
    }
    out.extend(codes.chunks_exact(bytes).map(|row| nibble_dot(row, q)));
}

fn nibble_dot(row: &[u8], q: &[i8]) -> i32 {
    let mut total = 0i32;
    for (block, bytes) in row.chunks_exact(32).enumerate() {
        let q = &q[block * 64..block * 64 + 64];
        for (j, &b) in bytes.iter().enumerate() {
            total += (b & 15) as i32 * q[j] as i32 + (b >> 4) as i32 * q[32 + j] as i32;
        }
    }
    total
}

/// Rows scored per thread at least: below this a second thread costs more than it saves.
const ROWS_PER_THREAD: usize = 16_384;

/// Dot product of two i8 code vectors.
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| x as i16 as i32 * y as i16 as i32)
        .sum()
}

/// Quantized dot products of every row of `codes` (rows of `dims`) with `q`, into `out`.
///
/// The scan is bound by memory and multiply-adds; AVX2 does 32 code pairs per step where the
/// portable loop does a handful, so the CPU is asked once per scan which one to run.
fn dot_rows(codes: &[i8], dims: usize, q: &[i8], out: &mut Vec<i32>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        unsafe { avx2::dot_rows(codes, dims, q, out) };
        return;
    }
    out.extend(codes.chunks_exact(dims).map(|row| dot_i8(row, q)));
}

/// Like `dot_rows`, for the rows `rows` of `codes` (scattered: the next rows are fetched from
/// memory while one is scored).
fn dot_some_rows(codes: &[i8], dims: usize, rows: &[u32], q: &[i8], out: &mut Vec<i32>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        unsafe { avx2::dot_some_rows(codes, dims, rows, q, out) };
        return;
    }
    out.extend(rows.iter().map(|&r| {
        let r = r as usize;
        dot_i8(&codes[r * dims..(r + 1) * dims], q)
    }));
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2")]
    pub(super) fn dot_rows(codes: &[i8], dims: usize, q: &[i8], out: &mut Vec<i32>) {
        out.extend(codes.chunks_exact(dims).map(|row| dot(row, q)));
    }

    /// 4-bit rows against i8 query codes: per 32 bytes, the low and high nibbles as two u8
    /// vectors times the query's two matching 32-code halves with `maddubs` (a pair sums to at
    /// most 2 · 15 · 127, two pairs' sums to 7,620: nothing saturates).
    #[target_feature(enable = "avx2")]
    pub(super) fn nibble_dots(codes: &[u8], bytes: usize, q: &[i8], out: &mut Vec<i32>) {
        let low = _mm256_set1_epi8(15);
        let ones = _mm256_set1_epi16(1);
        assert!(
            q.len() >= bytes * 2,
            "query codes padded to the row's nibbles"
        );
        for row in codes.chunks_exact(bytes) {
            let mut acc = _mm256_setzero_si256();
            let mut i = 0;
            while i + 32 <= bytes {
                // SAFETY: i + 32 <= bytes = row.len() and 2i + 64 <= 2 · bytes <= q.len().
                let (c, qlo, qhi) = unsafe {
                    (
                        _mm256_loadu_si256(row.as_ptr().add(i).cast()),
                        _mm256_loadu_si256(q.as_ptr().add(2 * i).cast()),
                        _mm256_loadu_si256(q.as_ptr().add(2 * i + 32).cast()),
                    )
                };
                let lo = _mm256_and_si256(c, low);
                let hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), low);
                let pairs =
                    _mm256_add_epi16(_mm256_maddubs_epi16(lo, qlo), _mm256_maddubs_epi16(hi, qhi));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
                i += 32;
            }
            out.push(sum_lanes(acc));
        }
    }

    /// The sum of the eight i32 lanes of `acc`.
    #[target_feature(enable = "avx2")]
    fn sum_lanes(acc: __m256i) -> i32 {
        let s = _mm_add_epi32(
            _mm256_castsi256_si128(acc),
            _mm256_extracti128_si256(acc, 1),
        );
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        _mm_cvtsi128_si32(s)
    }

    /// Rows ahead whose cache lines are requested before they are scored.
    const PREFETCH_AHEAD: usize = 4;

    #[target_feature(enable = "avx2")]
    pub(super) fn dot_some_rows(
        codes: &[i8],
        dims: usize,
        rows: &[u32],
        q: &[i8],
        out: &mut Vec<i32>,
    ) {
        for (i, &r) in rows.iter().enumerate() {
            if let Some(&ahead) = rows.get(i + PREFETCH_AHEAD) {
                let start = ahead as usize * dims;
                for line in (start..start + dims).step_by(64) {
                    if let Some(byte) = codes.get(line) {
                        // A hint with a valid address: it reads nothing.
                        _mm_prefetch::<_MM_HINT_T0>((byte as *const i8).cast());
                    }
                }
            }
            let r = r as usize;
            out.push(dot(&codes[r * dims..(r + 1) * dims], q));
        }
    }

    /// i8 · i8 with `maddubs` (unsigned × signed byte pairs summed to i16): |a| times b with
    /// a's sign moved onto b. Codes lie in -127..=127, so |a| fits a byte and a pair sums to at
    /// most 2 · 127 · 127, inside i16: nothing saturates.
    #[target_feature(enable = "avx2")]
    fn dot(a: &[i8], b: &[i8]) -> i32 {
        let n = a.len().min(b.len());
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_si256();
        let mut i = 0;
        while i + 32 <= n {
            // SAFETY: i + 32 <= n, within both slices; loadu has no alignment requirement.
            let (va, vb) = unsafe {
                (
                    _mm256_loadu_si256(a.as_ptr().add(i).cast()),
                    _mm256_loadu_si256(b.as_ptr().add(i).cast()),
                )
            };
            let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(va, va), _mm256_sign_epi8(vb, va));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
            i += 32;
        }
        let mut total = sum_lanes(acc);
        for j in i..n {
            total += a[j] as i32 * b[j] as i32;
        }
        total
    }
}

fn scan_threads() -> usize {
    crate::process::cores()
}

impl VectorMatrix {
    pub fn new(dims: usize) -> Self {
        VectorMatrix {
            dims,
            words: dims.div_ceil(64),
            ..Default::default()
        }
    }

    /// Use the sign-bit pass from `rows` rows on (instead of `PREFILTER_MIN_ROWS`).
    pub fn with_sign_bit_pass_from(mut self, rows: usize) -> Self {
        self.prefilter_from = Some(rows);
        self
    }

    /// Use the 4-bit pass from `rows` rows on (instead of `NIBBLE_MIN_ROWS`).
    pub fn with_nibble_pass_from(mut self, rows: usize) -> Self {
        self.nibble_from = Some(rows);
        self
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
            + self.nibbles.len()
            + self.nibble_scales.len() * 4
            + self.signs.len() * 8
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
                        self.signs.resize(self.signs.len() + self.words, 0);
                        self.nibbles
                            .resize(self.nibbles.len() + self.nibble_bytes(), 0);
                        self.nibble_scales.push(0.0);
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
        let nb = self.nibble_bytes();
        self.nibble_scales[row] = quantize_nibbles(v, &mut self.nibbles[row * nb..(row + 1) * nb]);
        let signs = &mut self.signs[row * self.words..(row + 1) * self.words];
        signs.fill(0);
        for (i, x) in v.iter().enumerate() {
            if *x > 0.0 {
                signs[i / 64] |= 1 << (i % 64);
            }
        }
    }

    pub fn remove(&mut self, kbid: &str) {
        if let Some(r) = self.rows.remove(kbid) {
            self.kbids[r].clear();
            self.scales[r] = 0.0;
            self.free.push(r);
        }
    }

    /// Bytes of 4-bit codes per row.
    fn nibble_bytes(&self) -> usize {
        self.words * 32
    }

    /// The live rows at or above the score that about `keep` of `scores` reach, in row order.
    /// The cut-off comes from a sample of every 16th score (a full selection over all rows costs
    /// as much as a pass itself).
    fn best_rows(&self, scores: &[f32], keep: usize) -> Vec<u32> {
        let mut sample: Vec<f32> = scores.iter().step_by(16).copied().collect();
        let nth = (keep / 16).clamp(1, sample.len()) - 1;
        let (_, cut, _) = sample.select_nth_unstable_by(nth, |a, b| b.total_cmp(a));
        let cut = *cut;
        scores
            .iter()
            .enumerate()
            .filter(|&(row, s)| *s >= cut && !self.kbids[row].is_empty())
            .map(|(row, _)| row as u32)
            .collect()
    }

    /// Rows that pass the 4-bit pass: about the best `keep` live rows, in row order. (A heap
    /// of the best per thread instead of the score array measured slower: 2.3 vs 1.5 ms.)
    fn nibble_candidates(&self, q: &[i8], keep: usize) -> Vec<u32> {
        let nb = self.nibble_bytes();
        let mut padded = vec![0i8; nb * 2];
        padded[..q.len()].copy_from_slice(q);
        // Σ (cᵢ - 7.5)·qᵢ = Σ cᵢ·qᵢ - 7.5 · Σ qᵢ; the query's scale is the same for every row.
        let offset = 7.5 * q.iter().map(|&x| x as i32).sum::<i32>() as f32;
        let scores = on_all_cores(self.kbids.len(), |range| {
            let mut dots = Vec::with_capacity(range.len());
            nibble_dots(
                &self.nibbles[range.start * nb..range.end * nb],
                nb,
                &padded,
                &mut dots,
            );
            dots.into_iter()
                .zip(&self.nibble_scales[range])
                .map(|(dot, &s)| (dot as f32 - offset) * s)
                .collect()
        });
        self.best_rows(&scores, keep)
    }

    /// Rows that pass the sign-bit pass: the best `keep` live rows by sign score, in row order.
    fn sign_candidates(&self, query: &[f32], keep: usize) -> Vec<u32> {
        let planes = QueryPlanes::new(query, self.words);
        let rows = self.kbids.len();
        let scores = on_all_cores(rows, |range| {
            let bits = &self.signs[range.start * self.words..range.end * self.words];
            sign_scores(bits, self.words, &planes)
        });
        self.best_rows(&scores, keep)
    }

    /// Quantized scores (≈ cosine) of `rows` (all live rows when `None`) for the query codes.
    fn scores(&self, q: &[i8], qs: f32, rows: Option<&[u32]>) -> Vec<(f32, u32)> {
        let d = self.dims;
        let score = |row: usize, dot: i32| {
            let s = self.scales[row];
            (!(s == 0.0 && self.kbids[row].is_empty())).then_some((dot as f32 * s * qs, row as u32))
        };
        match rows {
            None => on_all_cores(self.kbids.len(), |range| {
                let mut dots = Vec::with_capacity(range.len());
                dot_rows(&self.codes[range.start * d..range.end * d], d, q, &mut dots);
                dots.into_iter()
                    .zip(range)
                    .filter_map(|(dot, row)| score(row, dot))
                    .collect()
            }),
            Some(rows) => on_all_cores(rows.len(), |range| {
                let mut dots = Vec::with_capacity(range.len());
                dot_some_rows(&self.codes, d, &rows[range.clone()], q, &mut dots);
                dots.into_iter()
                    .zip(&rows[range])
                    .filter_map(|(dot, &row)| score(row as usize, dot))
                    .collect()
            }),
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
        let live = self.rows.len();
        let keep = (live / PREFILTER_KEEP_DIVISOR).max(k.saturating_mul(PREFILTER_KEEP_PER_RESULT));
        if live >= self.prefilter_from.unwrap_or(PREFILTER_MIN_ROWS) && keep < live {
            let candidates = self.sign_candidates(query, keep);
            let out = self.best(self.scores(&q, qs, Some(&candidates)), k, accept);
            if out.len() == k {
                return out;
            }
            // A filter rejected most candidates: the rest of the matrix may hold what it allows.
        } else if live >= self.nibble_from.unwrap_or(NIBBLE_MIN_ROWS) {
            let keep = k
                .saturating_mul(NIBBLE_KEEP_PER_RESULT)
                .max(NIBBLE_KEEP_MIN);
            if keep < live {
                let candidates = self.nibble_candidates(&q, keep);
                let out = self.best(self.scores(&q, qs, Some(&candidates)), k, accept);
                if out.len() == k {
                    return out;
                }
            }
        }
        self.best(self.scores(&q, qs, None), k, accept)
    }

    /// `top` without the sign-bit pass: every row scored with its i8 codes (what the sign-bit
    /// pass is measured against).
    pub fn top_exhaustive(
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
        self.best(self.scores(&q, qs, None), k, accept)
    }

    /// The best `k` of `scored` that `accept` allows, best first (ties by kbid).
    fn best(
        &self,
        mut scored: Vec<(f32, u32)>,
        k: usize,
        accept: &mut dyn FnMut(&str) -> bool,
    ) -> Vec<(String, f32)> {
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

/// `work` over `0..n` split in contiguous ranges, one per core when `n` is large enough to pay
/// for the threads; the parts are concatenated in order.
fn on_all_cores<T: Send>(
    n: usize,
    work: impl Fn(std::ops::Range<usize>) -> Vec<T> + Sync,
) -> Vec<T> {
    let threads = scan_threads().min(n / ROWS_PER_THREAD).max(1);
    if threads == 1 {
        return work(0..n);
    }
    let per_thread = n.div_ceil(threads);
    let work = &work;
    std::thread::scope(|scope| {
        // A part no thread could be started for (a process limit) is done on this thread.
        let parts: Vec<_> = (0..n)
            .step_by(per_thread)
            .map(|start| {
                let range = start..(start + per_thread).min(n);
                std::thread::Builder::new()
                    .spawn_scoped(scope, {
                        let range = range.clone();
                        move || work(range)
                    })
                    .map_err(|_| range)
            })
            .collect();
        let mut all = Vec::with_capacity(n);
        for part in parts {
            all.extend(match part {
                Ok(h) => h
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(range) => work(range),
            });
        }
        all
    })
}

/// The query as 4-bit levels in bit planes, for scoring sign bits: with `b` a row's sign bits
/// and `u` the query's levels, Σ over set bits of q ≈ lo · |b| + step · Σⱼ 2ʲ · |b ∧ planeⱼ|,
/// and the sign score Σᵢ qᵢ · ±1 is twice that minus Σ q (the same for every row, so ranking
/// by the first term is enough).
struct QueryPlanes {
    lo: f32,
    step: f32,
    /// Per 64 dimensions, the four planes' words side by side (one cache line for two words).
    planes: Vec<[u64; 4]>,
}

impl QueryPlanes {
    fn new(q: &[f32], words: usize) -> Self {
        let lo = q.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = q.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let step = if hi > lo { (hi - lo) / 15.0 } else { 0.0 };
        let mut planes = vec![[0u64; 4]; words];
        for (i, x) in q.iter().enumerate() {
            let level = if step > 0.0 {
                ((x - lo) / step).round().clamp(0.0, 15.0) as u32
            } else {
                0
            };
            for (j, plane) in planes[i / 64].iter_mut().enumerate() {
                if level >> j & 1 == 1 {
                    *plane |= 1 << (i % 64);
                }
            }
        }
        QueryPlanes { lo, step, planes }
    }
}

/// Sign scores of the rows of `bits` (`words` u64 each).
fn sign_scores(bits: &[u64], words: usize, q: &QueryPlanes) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU has POPCNT (checked just above).
        return unsafe { sign_scores_popcnt(bits, words, q) };
    }
    sign_scores_portable(bits, words, q)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn sign_scores_popcnt(bits: &[u64], words: usize, q: &QueryPlanes) -> Vec<f32> {
    sign_scores_portable(bits, words, q)
}

/// Inlined into the POPCNT build above, where `count_ones` is one instruction. Plain loops: a
/// closure would be compiled apart, without the target feature.
#[inline(always)]
fn sign_scores_portable(bits: &[u64], words: usize, q: &QueryPlanes) -> Vec<f32> {
    let mut out = Vec::with_capacity(bits.len() / words);
    for row in bits.chunks_exact(words) {
        let (mut set, mut levels) = (0u32, 0u32);
        for (&b, p) in row.iter().zip(&q.planes) {
            set += b.count_ones();
            levels += (b & p[0]).count_ones()
                + ((b & p[1]).count_ones() << 1)
                + ((b & p[2]).count_ones() << 2)
                + ((b & p[3]).count_ones() << 3);
        }
        out.push(q.lo * set as f32 + q.step * levels as f32);
    }
    out
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

    /// A small deterministic generator (no dependency for one test).
    fn codes(seed: u64, n: usize) -> Vec<i8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x % 255) as i16 - 127) as i8
            })
            .collect()
    }

    #[test]
    fn every_dot_product_path_agrees() {
        for dims in [1, 31, 32, 33, 384, 1000] {
            let q = codes(7 + dims as u64, dims);
            let mut rows = codes(99, dims * 20);
            // The extremes: ±127 everywhere, and zeros.
            rows[..dims].fill(127);
            rows[dims..2 * dims].fill(-127);
            rows[2 * dims..3 * dims].fill(0);
            let expected: Vec<i32> = rows.chunks_exact(dims).map(|r| dot_i8(r, &q)).collect();
            let mut got = Vec::new();
            dot_rows(&rows, dims, &q, &mut got);
            assert_eq!(got, expected, "dims {dims}");
        }
    }

    /// A unit vector near one of a few directions (embeddings cluster by topic).
    fn clustered(seed: u64, dims: usize, centers: usize) -> Vec<f32> {
        let center = codes(1 + seed % centers as u64, dims);
        let noise = codes(seed * 7919 + 13, dims);
        unit(
            &center
                .iter()
                .zip(&noise)
                .map(|(&c, &n)| c as f32 + 0.8 * n as f32)
                .collect::<Vec<_>>(),
        )
    }

    /// A matrix of `rows` pseudo-random rows of `dims` dimensions (`seed` picks them), kbids
    /// `k000000`… in row order.
    fn matrix_of(dims: usize, rows: usize, seed: u64) -> VectorMatrix {
        let mut m = VectorMatrix::new(dims);
        for (i, row) in codes(seed, rows * dims).chunks_exact(dims).enumerate() {
            let v: Vec<f32> = row.iter().map(|&c| c as f32 + 0.5).collect();
            m.upsert(&format!("k{i:06}"), &unit(&v));
        }
        m
    }

    #[test]
    fn a_scan_split_across_threads_scores_every_row_in_order() {
        let dims = 8;
        let rows = ROWS_PER_THREAD * 2 + 123;
        let m = matrix_of(dims, rows, 3);
        let q = codes(5, dims);
        let expected: Vec<(f32, u32)> = m
            .codes
            .chunks_exact(dims)
            .enumerate()
            .map(|(row, r)| (dot_i8(r, &q) as f32 * m.scales[row], row as u32))
            .collect();
        assert_eq!(m.scores(&q, 1.0, None), expected);
        let some = [0u32, 5, ROWS_PER_THREAD as u32 + 1, rows as u32 - 1];
        let picked: Vec<(f32, u32)> = some.iter().map(|&r| expected[r as usize]).collect();
        assert_eq!(m.scores(&q, 1.0, Some(&some)), picked);
    }

    /// The calling thread moved into a cgroup-v1 `pids` group where it may start no thread
    /// (None: this machine lets no test do that); moved back when dropped.
    struct NoNewThreads {
        dir: std::path::PathBuf,
        tid: i32,
    }

    impl NoNewThreads {
        fn here() -> Option<NoNewThreads> {
            let root = std::path::Path::new("/sys/fs/cgroup/pids");
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let dir = root.join(format!("kbdb-test-{}-{tid}", std::process::id()));
            std::fs::create_dir(&dir).ok()?;
            let limit = NoNewThreads { dir, tid };
            std::fs::write(limit.dir.join("pids.max"), "1").ok()?;
            std::fs::write(limit.dir.join("tasks"), tid.to_string()).ok()?;
            Some(limit)
        }
    }

    impl Drop for NoNewThreads {
        fn drop(&mut self) {
            let root = std::path::Path::new("/sys/fs/cgroup/pids");
            let _ = std::fs::write(root.join("tasks"), self.tid.to_string());
            let _ = std::fs::remove_dir(&self.dir);
        }
    }

    #[test]
    fn a_scan_that_can_start_no_thread_scores_every_row_on_its_own() {
        let dims = 8;
        let m = matrix_of(dims, ROWS_PER_THREAD * 2 + 57, 9);
        let q = codes(4, dims);
        let expected = m.scores(&q, 1.0, None);
        if scan_threads() < 2 {
            eprintln!("skipped: one core, so the scan never starts a thread");
            return;
        }
        let Some(limit) = NoNewThreads::here() else {
            eprintln!(
                "skipped: this machine lets no test limit a thread's children (cgroup v1 pids)"
            );
            return;
        };
        if std::thread::Builder::new().spawn(|| {}).is_ok() {
            drop(limit);
            eprintln!("skipped: the pids limit did not stop a new thread here");
            return;
        }
        let scored = m.scores(&q, 1.0, None);
        drop(limit);
        assert_eq!(
            scored, expected,
            "every part done on the calling thread, in order"
        );
    }

    #[test]
    fn every_nibble_dot_path_agrees_with_the_codes_it_packs() {
        for dims in [1usize, 31, 32, 33, 64, 384, 1000] {
            let words = dims.div_ceil(64);
            let nb = words * 32;
            let v = unit(
                &codes(11 + dims as u64, dims)
                    .iter()
                    .map(|&c| c as f32)
                    .collect::<Vec<_>>(),
            );
            let mut packed = vec![0u8; nb * 3];
            let s0 = quantize_nibbles(&v, &mut packed[..nb]);
            quantize_nibbles(&vec![0.0; dims], &mut packed[nb..2 * nb]);
            let extreme: Vec<f32> = (0..dims)
                .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
                .collect();
            quantize_nibbles(&extreme, &mut packed[2 * nb..]);
            let mut q = vec![0i8; nb * 2];
            q[..dims].copy_from_slice(&codes(5 + dims as u64, dims));
            q[..dims.min(4)].fill(-127);
            let mut got = Vec::new();
            nibble_dots(&packed, nb, &q, &mut got);
            let expected: Vec<i32> = packed.chunks_exact(nb).map(|r| nibble_dot(r, &q)).collect();
            assert_eq!(got, expected, "dims {dims}");
            // The packed codes stand for the vector: (c - 7.5) · scale ≈ v.
            for (i, &x) in v.iter().enumerate() {
                let byte = packed[i / 64 * 32 + i % 64 % 32];
                let c = if i % 64 < 32 { byte & 15 } else { byte >> 4 };
                assert!(
                    (x - (c as f32 - 7.5) * s0).abs() <= s0 / 2.0 + 1e-6,
                    "dims {dims} [{i}]"
                );
            }
        }
    }

    /// `m` with `rows` clustered vectors around `centers` directions.
    fn filled(mut m: VectorMatrix, rows: usize, centers: usize) -> VectorMatrix {
        for i in 0..rows {
            m.upsert(&format!("k{i:06}"), &clustered(i as u64, m.dims, centers));
        }
        m
    }

    /// `top` (with its candidate pass) returns exactly what the exhaustive scan returns.
    fn assert_pass_matches_exhaustive(m: &VectorMatrix, centers: usize) {
        for seed in [3u64, 17, 29] {
            let query = clustered(1_000_000 + seed, m.dims, centers);
            let exact = m.top_exhaustive(&query, 100, &mut |_| true);
            let fast = m.top(&query, 100, &mut |_| true);
            assert_eq!(fast, exact, "query {seed}");
        }
    }

    /// A filter that allows only the 3 rows farthest from the query (far outside any pass's
    /// candidates) still finds them.
    fn assert_filter_finds_the_farthest(m: &VectorMatrix, query: &[f32]) {
        let rows = m.len();
        let mut all = m.top_exhaustive(query, rows, &mut |_| true);
        let worst: Vec<String> = all
            .split_off(rows - 3)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let found = m.top(query, 3, &mut |k| worst.iter().any(|w| w == k));
        let found: Vec<String> = found.into_iter().map(|(k, _)| k).collect();
        assert_eq!(found, worst);
    }

    #[test]
    fn the_nibble_pass_finds_what_the_full_scan_finds() {
        let rows = 20_000;
        let mut m = filled(VectorMatrix::new(384).with_nibble_pass_from(rows), rows, 40);
        assert_pass_matches_exhaustive(&m, 40);
        let query = clustered(2, 384, 40);
        assert_filter_finds_the_farthest(&m, &query);
        // A removed row is never a candidate.
        let best = m.top(&query, 1, &mut |_| true)[0].0.clone();
        m.remove(&best);
        assert!(
            m.top(&query, 100, &mut |_| true)
                .iter()
                .all(|(k, _)| *k != best)
        );
    }

    #[test]
    fn the_sign_bit_pass_finds_what_the_full_scan_finds() {
        let rows = 20_000;
        let m = filled(
            VectorMatrix::new(96).with_sign_bit_pass_from(rows),
            rows,
            40,
        );
        assert_pass_matches_exhaustive(&m, 40);
    }

    #[test]
    fn a_filter_that_rejects_the_candidates_still_finds_its_rows() {
        let rows = 20_000;
        let m = filled(VectorMatrix::new(32).with_sign_bit_pass_from(rows), rows, 5);
        assert_filter_finds_the_farthest(&m, &clustered(2, 32, 5));
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
