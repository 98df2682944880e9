//! `learn`: validation of a request into a prepared section, then applying it inside a write
//! transaction (dedup, attach, supersession by source key, near-duplicates, change log).

use base64::Engine;

use crate::config::Limits;
use crate::error::{KbError, Result};
use crate::index::near_dup;
use crate::store::txn::WriteTables;
use crate::text::{preprocess, shingles};
use crate::types::records::{ChangeKind, DocumentRecord, SectionRecord};
use crate::types::section_type::{TypeKind, parse_type};
use crate::types::validate::*;
use crate::types::{LearnRequest, LearnResult, NearDuplicate, kbid};

/// A validated section, ready to be written.
pub(crate) struct Prepared {
    pub(crate) kbid: String,
    section_type: String,
    bytes: Vec<u8>,
    /// `bytes` compressed, when that is shorter (src/store/content_codec.rs): compressed here,
    /// outside the write transaction, like the rest.
    compressed: Option<Vec<u8>>,
    /// The id of the content dictionary `compressed` was tried with (None: none).
    compressed_with: Option<u32>,
    title: Option<String>,
    description: Option<String>,
    docid: Option<String>,
    pub(crate) tags: Vec<String>,
    replace: bool,
    source_key: Option<String>,
    warnings: Vec<String>,
    terms_count: u64,
    /// Hex SHA-256 of `bytes`.
    checksum: String,
    /// Shingles and LSH band keys (text types), reference markers: computed here, outside the
    /// write transaction (the daemon prepares on each client's thread, in parallel).
    bands: Option<(shingles::ShingleSet, near_dup::BandKeys)>,
    markers: Vec<crate::text::markers::Marker>,
    /// Near duplicates already looked for outside the write transaction (`scan_near_duplicates`).
    near: Option<NearScan>,
    /// Append to the docid's manifest (false when the caller sets the whole manifest itself,
    /// as `learn_document` does).
    pub(crate) attach: bool,
}

pub(crate) fn prepare(mut req: LearnRequest, limits: &Limits) -> Result<Prepared> {
    let (section_type, kind) = parse_type(req.section_type.as_deref())?;
    if req.content.len() as u64 > limits.max_content_bytes {
        return Err(KbError::invalid(
            "content",
            format!(
                "is {} bytes; the limit is {} (limits.max_content_bytes in worker.toml, or KBDB_MAX_CONTENT_BYTES)",
                req.content.len(),
                limits.max_content_bytes
            ),
        ));
    }
    let mut title = validate_line("title", req.title.as_deref(), MAX_TITLE_CHARS)?;
    let description = validate_description(req.description.as_deref())?;
    if let Some(d) = &mut req.docid {
        *d = crate::types::validate::docid(d)?.into_owned();
    }
    let tags = validate_tags(&req.tags)?;
    let source = validate_line("source", req.source.as_deref(), MAX_SOURCE_CHARS)?;
    let mut warnings = Vec::new();

    let bytes = match kind {
        TypeKind::Image => {
            if title.is_none() {
                return Err(KbError::invalid("title", "is required for image/* types"));
            }
            decode_image(&section_type, &req.content)?
        }
        TypeKind::Text | TypeKind::Json => {
            // NUL is no text (UTF-16 or binary data read as UTF-8): refused, not stored.
            if let Some(at) = req.content.find('\0') {
                return Err(KbError::invalid(
                    "content",
                    format!(
                        "contains a NUL character (U+0000) at byte {at}; text must not contain NUL (UTF-16 or binary data? learn images as image/*)"
                    ),
                ));
            }
            let text = preprocess(&req.content);
            if text.is_empty() {
                return Err(KbError::invalid(
                    "content",
                    "must not be empty (or only whitespace)",
                ));
            }
            if kind == TypeKind::Json {
                serde_json::from_str::<serde::de::IgnoredAny>(&text).map_err(|e| {
                    KbError::invalid(
                        "content",
                        format!(
                            "is not valid JSON for application/json (line {}, column {}: {})",
                            e.line(),
                            e.column(),
                            e.to_string().split(" at line").next().unwrap_or_default()
                        ),
                    )
                })?;
            }
            if title.is_none() && section_type == "text/markdown" {
                title = leading_heading(&text);
            }
            if title.is_none() {
                warnings.push("heading_missing".to_string());
            }
            text.into_bytes()
        }
    };
    if kind == TypeKind::Image && bytes.is_empty() {
        return Err(KbError::invalid(
            "content",
            "decodes to no bytes; an image must not be empty",
        ));
    }

    let terms_count = match kind {
        TypeKind::Image => 0,
        _ => {
            let text = std::str::from_utf8(&bytes).unwrap_or_default();
            let mut all = String::with_capacity(text.len() + 64);
            for part in [title.as_deref(), description.as_deref(), Some(text)]
                .into_iter()
                .flatten()
            {
                all.push_str(part);
                all.push('\n');
            }
            shingles::distinct_terms(&all) as u64
        }
    };
    let source_key = source.or_else(|| {
        title
            .as_ref()
            .map(|t| format!("{}#{}", req.docid.as_deref().unwrap_or(""), t))
    });
    let digest = kbid::sha256(&bytes);
    let bands = shingles_and_bands(&section_type, &bytes);
    let markers = crate::references::markers_of(&section_type, &bytes, req.docid.as_deref());
    let dictionary = crate::store::content_codec::preparing_dictionary();
    let compressed = crate::store::content_codec::compress(&section_type, &bytes, dictionary);
    Ok(Prepared {
        kbid: kbid::encode_kbid(&digest),
        checksum: kbid::hex(&digest),
        bands,
        markers,
        near: None,
        section_type,
        bytes,
        compressed,
        compressed_with: dictionary.map(|d| d.id),
        title,
        description,
        docid: req.docid,
        tags,
        replace: req.replace,
        source_key,
        warnings,
        terms_count,
        attach: true,
    })
}

/// The text of a markdown section's first line when it is an ATX heading (`# Title`).
fn leading_heading(text: &str) -> Option<String> {
    let line = text.lines().next()?.trim_start();
    let hashes = line.bytes().take_while(|&b| b == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return None;
    }
    let heading = rest.trim().trim_end_matches('#').trim();
    validate_line("title", Some(heading), MAX_TITLE_CHARS)
        .ok()
        .flatten()
}

fn decode_image(section_type: &str, content: &str) -> Result<Vec<u8>> {
    let mut b64 = content.trim();
    // Accept a data URL as pasted from a browser.
    if let Some(rest) = b64.strip_prefix("data:")
        && let Some((_, data)) = rest.split_once(";base64,")
    {
        b64 = data;
    }
    let compact: String = b64.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let bytes = engine.decode(compact.as_bytes()).map_err(|e| {
        KbError::invalid(
            "content",
            format!("is not valid base64 for {section_type} ({e})"),
        )
    })?;
    if !bytes.is_empty() && !image_signature_ok(section_type, &bytes) {
        return Err(KbError::invalid(
            "content",
            format!("decoded bytes are not a {section_type} image (file signature does not match)"),
        ));
    }
    Ok(bytes)
}

/// Whether image bytes carry the file signature of their type (types without a known signature
/// pass).
pub(crate) fn image_signature_ok(section_type: &str, bytes: &[u8]) -> bool {
    match section_type {
        "image/png" => bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "image/jpeg" | "image/jpg" => bytes.starts_with(&[0xff, 0xd8, 0xff]),
        "image/gif" => bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a"),
        "image/webp" => bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP",
        "image/bmp" => bytes.starts_with(b"BM"),
        _ => true,
    }
}

/// Stored bytes as the text the API returns: UTF-8 text, or base64 for images.
pub(crate) fn content_as_text(section_type: &str, bytes: &[u8]) -> String {
    if section_type.starts_with("image/") {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    }
}

/// MinHash band keys of a text section's content (None for images).
pub(crate) fn band_keys_of(section_type: &str, bytes: &[u8]) -> Option<near_dup::BandKeys> {
    shingles_and_bands(section_type, bytes).map(|(_, k)| k)
}

/// The shingles of a text section and their band keys (None for images and empty text).
fn shingles_and_bands(
    section_type: &str,
    bytes: &[u8],
) -> Option<(shingles::ShingleSet, near_dup::BandKeys)> {
    if section_type.starts_with("image/") {
        return None;
    }
    let sh = shingles::shingle_hashes(std::str::from_utf8(bytes).ok()?);
    if sh.is_empty() {
        return None;
    }
    let keys = near_dup::band_keys(&near_dup::signature(&sh));
    Some((sh, keys))
}

pub(crate) fn apply(t: &mut WriteTables<'_>, p: Prepared) -> Result<LearnResult> {
    let mut warnings = p.warnings.clone();
    let existing = t.section(&p.kbid)?;
    let mut attached = false;
    let mut skipped = false;
    let mut near_duplicates = Vec::new();
    let indexed_terms_count;
    let created_at;

    match existing {
        Some(mut rec) => {
            indexed_terms_count = 0;
            created_at = rec.created_at.clone();
            let mut changed = false;
            match p.docid.as_ref().filter(|_| p.attach) {
                Some(docid) => {
                    if !t.holds(docid, &p.kbid, &rec)? {
                        append_to_document(t, docid, &p.kbid)?;
                        attached = true;
                    } else {
                        skipped = true;
                    }
                }
                None => {
                    skipped = true;
                    if p.docid.is_none() && !rec.standalone {
                        rec.standalone = true;
                        changed = true;
                    }
                }
            }
            for tag in &p.tags {
                if !rec.tags.contains(tag) {
                    rec.tags.push(tag.clone());
                    t.tags.insert(tag.as_str(), p.kbid.as_str())?;
                    changed = true;
                }
            }
            if changed {
                rec.updated_at = t.now().to_string();
                t.put_section(&p.kbid, &rec)?;
                t.log(ChangeKind::SectionChanged, &p.kbid)?;
            }
        }
        None => {
            indexed_terms_count = p.terms_count;
            created_at = t.now().to_string();
            if let Some((mine, keys)) = &p.bands {
                let keys = *keys;
                near_duplicates = match &p.near {
                    Some(scan) => complete_scan(t, &p, scan, mine, &keys)?,
                    None => None,
                }
                .map_or_else(|| find_near_duplicates(t, &p, mine, &keys), Ok)?;
                if let Some(cache) = t.shingle_cache {
                    cache.insert(&p.kbid, std::sync::Arc::new(mine.clone()));
                }
                t.pending_bands.add(&p.kbid, &keys);
                t.band_add(&p.kbid, keys);
            }
            let content_seq = t.put_prepared_content(
                &p.section_type,
                &p.bytes,
                p.compressed.as_deref(),
                p.compressed_with,
            )?;
            let rec = SectionRecord {
                section_type: p.section_type.clone(),
                title: p.title.clone(),
                description: p.description.clone(),
                tags: p.tags.clone(),
                source_key: p.source_key.clone(),
                created_at: created_at.clone(),
                updated_at: created_at.clone(),
                checksum: p.checksum.clone(),
                size: p.bytes.len() as u64,
                standalone: p.docid.is_none(),
                terms_count: p.terms_count,
                bands: p.bands.as_ref().map(|(_, keys)| *keys),
                content_seq,
                // Its first document is kept here, not as a row (`SectionRecord::doc`).
                doc: p.docid.clone().filter(|_| p.attach),
            };
            t.put_section(&p.kbid, &rec)?;
            for tag in &p.tags {
                t.tags.insert(tag.as_str(), p.kbid.as_str())?;
            }
            if let Some(k) = &p.source_key {
                t.source_key_add(k, &p.kbid);
            }
            crate::references::insert_edges(&mut t.refs_out, &mut t.refs_in, &p.kbid, &p.markers)?;
            t.log(ChangeKind::SectionAdded, &p.kbid)?;
            if let Some(docid) = p.docid.as_ref().filter(|_| p.attach) {
                // The record holds this first membership (`SectionRecord::doc`).
                list_in_document(t, docid, &p.kbid)?;
                t.log(ChangeKind::SectionDocsChanged, &p.kbid)?;
                t.log(ChangeKind::DocumentChanged, docid)?;
            }
        }
    }

    let mut superseded = Vec::new();
    match (&p.source_key, p.replace) {
        (Some(key), true) => {
            for old in t.kbids_with_source_key(key)? {
                if old != p.kbid {
                    supersede(t, &old, &p.kbid)?;
                    superseded.push(old);
                }
            }
        }
        (None, true) => warnings.push("replace_without_source_key".to_string()),
        (Some(key), false) => {
            if t.source_key_taken(key, &p.kbid)? {
                warnings.push("source_key_exists".to_string());
            }
        }
        (None, false) => {}
    }

    Ok(LearnResult {
        kbid: p.kbid,
        section_type: p.section_type,
        title: p.title,
        description: p.description,
        docid: p.docid,
        indexed_terms_count,
        elapsed_ms: 0.0,
        attached,
        skipped,
        superseded: crate::types::Superseded(superseded),
        warnings,
        near_duplicates,
        created_at,
        vector_embedding_failed: false,
    })
}

/// Near duplicates found before the write transaction and where the band index stood then.
#[derive(Debug)]
pub(crate) struct NearScan {
    point: near_dup::ScanPoint,
    found: Vec<NearDuplicate>,
}

impl Prepared {
    /// The near duplicates its scan found before the transaction (None: not scanned).
    #[cfg(test)]
    pub(crate) fn scanned(&self) -> Option<Vec<String>> {
        let scan = self.near.as_ref()?;
        Some(scan.found.iter().map(|d| d.kbid.clone()).collect())
    }
}

/// The candidates of a prepared learn in the committed band index (those sharing the most
/// bands, at most `MAX_CANDIDATES`) and where the index stood: the first half of a scan made
/// outside the write transaction, while the index is locked for reading.
pub(crate) fn scan_candidates(
    p: &Prepared,
    index: &near_dup::BandIndex,
) -> Option<(near_dup::ScanPoint, Vec<String>)> {
    let (_, keys) = p.bands.as_ref()?;
    if index.contains(&p.kbid) {
        // Content already stored: learning it again reports no near duplicates, so there is
        // nothing to look for (if it is unlearned before the write, the writer looks itself).
        return None;
    }
    let top = index.top_sharing(
        keys,
        near_dup::MIN_SHARED_BANDS,
        near_dup::MAX_CANDIDATES,
        |k| k == p.kbid,
    );
    Some((
        index.scan_point(),
        top.into_iter().map(|(k, _)| k.to_string()).collect(),
    ))
}

/// The second half, with the index unlocked: the exact similarity of each candidate. The daemon
/// does this on each client's thread, so the one writer only completes the scan with the
/// sections committed since (`complete_scan`). `load` reads a candidate's content (None: gone).
pub(crate) fn scan_near_duplicates(
    p: &mut Prepared,
    point: near_dup::ScanPoint,
    candidates: Vec<String>,
    cache: &near_dup::ShingleCache,
    mut load: impl FnMut(&str) -> Result<Option<Vec<u8>>>,
) -> Result<()> {
    let Some((mine, _)) = &p.bands else {
        return Ok(());
    };
    let mut found = Vec::new();
    for c in candidates {
        if let Some(sim) = similarity(mine, &c, Some(cache), &mut load)? {
            found.push(NearDuplicate {
                kbid: c,
                similarity: sim,
            });
        }
    }
    p.near = Some(NearScan { point, found });
    Ok(())
}

/// The Jaccard similarity of `mine` to section `c` when it reaches the near-duplicate threshold
/// (rounded to 3 decimals); None below it or when `c` is gone.
fn similarity(
    mine: &shingles::ShingleSet,
    c: &str,
    cache: Option<&near_dup::ShingleCache>,
    load: &mut impl FnMut(&str) -> Result<Option<Vec<u8>>>,
) -> Result<Option<f64>> {
    let theirs = match cache.and_then(|cache| cache.get(c)) {
        Some(set) => set,
        None => {
            let Some(bytes) = load(c)? else {
                return Ok(None);
            };
            let set =
                std::sync::Arc::new(shingles::shingle_hashes(&String::from_utf8_lossy(&bytes)));
            if let Some(cache) = cache {
                cache.insert(c, set.clone());
            }
            set
        }
    };
    let sim = shingles::jaccard(mine, &theirs);
    Ok((sim >= near_dup::THRESHOLD).then(|| (sim * 1000.0).round() / 1000.0))
}

/// Complete a scan made before the transaction: keep what it found that still exists, and check
/// the sections committed since and those added earlier in this transaction. None when the scan
/// cannot be completed (another band index, or too many additions since): look again.
fn complete_scan(
    t: &WriteTables<'_>,
    p: &Prepared,
    scan: &NearScan,
    mine: &shingles::ShingleSet,
    keys: &near_dup::BandKeys,
) -> Result<Option<Vec<NearDuplicate>>> {
    let Some(index) = t.band_index() else {
        return Ok(None);
    };
    let Some(since) = index.sharing_since(scan.point, keys, near_dup::MIN_SHARED_BANDS) else {
        return Ok(None);
    };
    let mut out: Vec<NearDuplicate> = scan
        .found
        .iter()
        .filter(|d| index.contains(&d.kbid) && !t.band_removed(&d.kbid))
        .cloned()
        .collect();
    let mut ranked: Vec<(u32, &str)> = since.into_iter().map(|(k, n)| (n, k)).collect();
    ranked.extend(added_in(t, keys));
    check_candidates(t, p, mine, ranked, &mut out)?;
    Ok(Some(out))
}

/// Compare exactly the candidates sharing the most bands (`ranked`: shared bands, kbid; a kbid
/// may be listed twice) that are not `p` itself, not already in `out` and not unlearned by this
/// transaction, at most `MAX_CANDIDATES`; add those at or above the threshold to `out`, and
/// keep the `MAX_CANDIDATES` most similar (ties: the most recent), most similar first.
fn check_candidates(
    t: &WriteTables<'_>,
    p: &Prepared,
    mine: &shingles::ShingleSet,
    mut ranked: Vec<(u32, &str)>,
    out: &mut Vec<NearDuplicate>,
) -> Result<()> {
    ranked.retain(|(_, k)| *k != p.kbid && !t.band_removed(k) && !out.iter().any(|d| d.kbid == *k));
    let mut load = |c: &str| t.content_unverified(c);
    // Sections added earlier in this transaction are the newest of all.
    let recency = |k: &str| match t.pending_bands.recency(k) {
        Some(r) => u64::MAX / 2 + r,
        None => t.band_index().and_then(|i| i.recency(k)).unwrap_or(0),
    };
    for (_, c) in top_candidates(ranked, &recency) {
        if let Some(sim) = similarity(mine, c, t.shingle_cache, &mut load)? {
            out.push(NearDuplicate {
                kbid: c.to_string(),
                similarity: sim,
            });
        }
    }
    // At most MAX_CANDIDATES are reported: the most similar, among equals the most recent
    // (looked up once each, and only when some must go); listed by similarity, then kbid.
    if out.len() > near_dup::MAX_CANDIDATES {
        let mut aged: Vec<(u64, NearDuplicate)> =
            out.drain(..).map(|d| (recency(&d.kbid), d)).collect();
        aged.sort_by(|(ra, a), (rb, b)| {
            b.similarity
                .total_cmp(&a.similarity)
                .then(rb.cmp(ra))
                .then(a.kbid.cmp(&b.kbid))
        });
        out.extend(
            aged.into_iter()
                .take(near_dup::MAX_CANDIDATES)
                .map(|(_, d)| d),
        );
    }
    out.sort_by(|a, b| {
        b.similarity
            .total_cmp(&a.similarity)
            .then(a.kbid.cmp(&b.kbid))
    });
    Ok(())
}

/// The `MAX_CANDIDATES` candidates sharing the most bands, each once (a section removed and
/// learned again in one transaction is listed twice: its larger count is kept). Ties go to the
/// most recently added (`recency`: larger is newer), then by kbid: a new section is most likely
/// a near copy of a recent one.
fn top_candidates(
    mut ranked: Vec<(u32, &str)>,
    recency: impl Fn(&str) -> u64,
) -> impl Iterator<Item = (u32, &str)> {
    ranked.sort_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)));
    ranked.dedup_by(|later, first| later.1 == first.1);
    let mut keyed: Vec<(u32, u64, &str)> = ranked
        .into_iter()
        .map(|(n, k)| (n, recency(k), k))
        .collect();
    // Most shared bands first; among equals the newest; then by kbid.
    keyed.sort_by_key(|&(n, r, k)| (std::cmp::Reverse(n), std::cmp::Reverse(r), k));
    keyed
        .into_iter()
        .take(near_dup::MAX_CANDIDATES)
        .map(|(n, _, k)| (n, k))
}

/// The sections added earlier in this transaction (not in the band index yet) sharing at least
/// `MIN_SHARED_BANDS` of `keys`: (shared bands, kbid).
fn added_in<'a>(
    t: &'a WriteTables<'_>,
    keys: &near_dup::BandKeys,
) -> impl Iterator<Item = (u32, &'a str)> {
    t.pending_bands
        .sharing(keys, near_dup::MIN_SHARED_BANDS)
        .into_iter()
        .map(|(k, n)| (n, k))
}

fn find_near_duplicates(
    t: &WriteTables<'_>,
    p: &Prepared,
    mine: &shingles::ShingleSet,
    keys: &near_dup::BandKeys,
) -> Result<Vec<NearDuplicate>> {
    // Count, per candidate, the bands it shares (reading at most PER_BAND entries of a band);
    // a true near duplicate (J ≥ 0.85) shares about 8 of 16, a chance match rarely 3.
    let mut ranked: Vec<(u32, &str)> = Vec::new();
    if let Some(index) = t.band_index() {
        // Only the committed sections that can make the cut (ranked like `top_candidates`,
        // which then merges them with this transaction's).
        ranked.extend(
            index
                .top_sharing(
                    keys,
                    near_dup::MIN_SHARED_BANDS,
                    near_dup::MAX_CANDIDATES,
                    |k| k == p.kbid || t.band_removed(k),
                )
                .into_iter()
                .map(|(k, n)| (n, k)),
        );
    }
    ranked.extend(added_in(t, keys));
    let mut out = Vec::new();
    check_candidates(t, p, mine, ranked, &mut out)?;
    Ok(out)
}

/// Store a section exactly as described by `rec` (an import): content, tags, source key,
/// near-duplicate bands and references (relative links against `base`). A section that
/// already exists keeps its record; tags are merged and `standalone` is kept when either says
/// so. Returns whether it was new.
pub(crate) fn insert_stored(
    t: &mut WriteTables<'_>,
    kbid: &str,
    mut rec: SectionRecord,
    bytes: &[u8],
    base: Option<&str>,
) -> Result<bool> {
    if let Some(mut existing) = t.section(kbid)? {
        let mut changed = false;
        for tag in &rec.tags {
            if !existing.tags.contains(tag) {
                existing.tags.push(tag.clone());
                t.tags.insert(tag.as_str(), kbid)?;
                changed = true;
            }
        }
        if rec.standalone && !existing.standalone {
            existing.standalone = true;
            changed = true;
        }
        if changed {
            t.put_section(kbid, &existing)?;
            t.log(ChangeKind::SectionChanged, kbid)?;
        }
        return Ok(false);
    }
    rec.bands = band_keys_of(&rec.section_type, bytes);
    if let Some(keys) = rec.bands {
        t.band_add(kbid, keys);
    }
    for tag in &rec.tags {
        t.tags.insert(tag.as_str(), kbid)?;
    }
    if let Some(k) = &rec.source_key {
        t.source_key_add(k, kbid);
    }
    let markers = crate::references::markers_of(&rec.section_type, bytes, base);
    crate::references::insert_edges(&mut t.refs_out, &mut t.refs_in, kbid, &markers)?;
    rec.content_seq = t.put_content(&rec.section_type, bytes)?;
    t.put_section(kbid, &rec)?;
    t.log(ChangeKind::SectionAdded, kbid)?;
    Ok(true)
}

/// Make `kbids` the ordered manifest of `docid` (creating the document when new), keeping the
/// membership tables in step; `update` sets the other fields. Returns the kbids that left the
/// document. No change (same kbids, same fields) writes nothing and returns None.
pub(crate) fn set_manifest(
    t: &mut WriteTables<'_>,
    docid: &str,
    kbids: Vec<String>,
    update: impl FnOnce(&mut DocumentRecord),
) -> Result<Option<Vec<String>>> {
    let now = t.now().to_string();
    let old = t.document(docid)?;
    let mut new_doc = old.clone().unwrap_or_else(|| DocumentRecord::empty(&now));
    new_doc.kbids = kbids;
    update(&mut new_doc);
    if let Some(o) = &old {
        let mut same = o.clone();
        same.updated_at = new_doc.updated_at.clone();
        if same == new_doc {
            return Ok(None);
        }
    }
    let old_kbids = old.map(|d| d.kbids).unwrap_or_default();
    let mut detached = Vec::new();
    for k in &old_kbids {
        if !new_doc.kbids.contains(k) && !detached.contains(k) {
            t.remove_membership(docid, k)?;
            detached.push(k.clone());
        }
    }
    let mut added = std::collections::HashSet::new();
    for k in &new_doc.kbids {
        if !old_kbids.contains(k) && added.insert(k.clone()) {
            t.add_membership(docid, k)?;
        }
    }
    *t.document_mut(docid)? = Some(new_doc);
    t.log(ChangeKind::DocumentChanged, docid)?;
    Ok(Some(detached))
}

/// Append `kbid` to the document's ordered manifest (creating the document when new).
pub(crate) fn append_to_document(t: &mut WriteTables<'_>, docid: &str, kbid: &str) -> Result<()> {
    list_in_document(t, docid, kbid)?;
    t.add_membership(docid, kbid)?;
    t.log(ChangeKind::DocumentChanged, docid)
}

/// `append_to_document`'s manifest side, without its log entry: the membership's section side
/// is the caller's (a new section's record holds its first document).
fn list_in_document(t: &mut WriteTables<'_>, docid: &str, kbid: &str) -> Result<()> {
    let now = t.now().to_string();
    let doc = t
        .document_mut(docid)?
        .get_or_insert_with(|| DocumentRecord::empty(&now));
    // Membership tables say whether the section is already listed (no manifest scan).
    doc.kbids.push(kbid.to_string());
    doc.updated_at = now;
    Ok(())
}

/// `new` takes `old`'s place in every document that holds `old`; then `old` is removed.
fn supersede(t: &mut WriteTables<'_>, old: &str, new: &str) -> Result<()> {
    for docid in t.docs_of(old)? {
        let Some(mut doc) = t.document(&docid)? else {
            continue;
        };
        // `new` takes `old`'s position; if `new` was also listed (e.g. just appended), the
        // first occurrence wins.
        let has_new = doc.kbids.iter().any(|k| k == new);
        let mut seen = false;
        doc.kbids = std::mem::take(&mut doc.kbids)
            .into_iter()
            .map(|k| if k == old { new.to_string() } else { k })
            .filter(|k| k != new || !std::mem::replace(&mut seen, true))
            .collect();
        if !has_new {
            t.add_membership(&docid, new)?;
        }
        t.remove_membership(&docid, old)?;
        doc.updated_at = t.now().to_string();
        t.put_document(&docid, &doc)?;
        t.log(ChangeKind::DocumentChanged, &docid)?;
    }
    // A superseded standalone fact is replaced by the new one: the new one inherits that status.
    if let Some(old_rec) = t.section(old)?
        && old_rec.standalone
        && let Some(mut rec) = t.section(new)?
        && !rec.standalone
    {
        rec.standalone = true;
        t.put_section(new, &rec)?;
    }
    crate::unlearn::remove_section(t, old)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_heading_is_taken_as_title() {
        assert_eq!(
            leading_heading("# Hello world ##\nbody").as_deref(),
            Some("Hello world")
        );
        assert_eq!(leading_heading("#hashtag\nbody"), None);
        assert_eq!(leading_heading("plain"), None);
    }
}
