//! Field paths (`id`, `title`, `model`, `meta.a.b`, `status`) and what a query reads of a
//! document ([`Doc`]), resolved without allocating.

use serde_json::Value;

use super::eval::{field, lookup};

/// Which top-level field of a view a path starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Root {
    Id,
    Title,
    Model,
    Meta,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Segment {
    key: String,
    index: Option<usize>,
}

/// A parsed field path, resolved by walking references (no allocation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FieldPath {
    pub(super) raw: String,
    root: Root,
    segments: Vec<Segment>,
}

impl FieldPath {
    pub(super) fn parse(raw: &str) -> Result<FieldPath, String> {
        if raw.is_empty() {
            return Err("empty path".to_string());
        }
        let mut parts = raw.split('.');
        let first = parts.next().unwrap_or_default();
        let (root, rest): (Root, Vec<&str>) = match first {
            "id" => (Root::Id, parts.collect()),
            "title" => (Root::Title, parts.collect()),
            "model" => (Root::Model, parts.collect()),
            "meta" => (Root::Meta, parts.collect()),
            _ => (Root::Meta, raw.split('.').collect()),
        };
        if first.is_empty() || rest.iter().any(|s| s.is_empty()) {
            return Err(format!("path \"{raw}\" has an empty segment"));
        }
        let segments = rest
            .into_iter()
            .map(|s| Segment {
                key: s.to_string(),
                index: segment_index(s),
            })
            .collect();
        Ok(FieldPath {
            raw: raw.to_string(),
            root,
            segments,
        })
    }

    /// The value at this path, `None` when missing (absent or `null`).
    #[inline]
    pub(super) fn resolve<'v, D: Doc + ?Sized>(&self, doc: &'v D) -> Option<&'v Value> {
        self.resolve_in(doc, doc.meta())
    }

    /// [`resolve`](Self::resolve) with the document's metadata already found (shared by all
    /// the conditions evaluated on one document).
    #[inline]
    pub(super) fn resolve_in<'v, D: Doc + ?Sized>(
        &self,
        doc: &'v D,
        meta: D::Meta<'v>,
    ) -> Option<&'v Value> {
        let (mut cur, rest) = match self.root {
            Root::Meta => match self.segments.split_first() {
                Some((first, rest)) => (D::meta_field(meta, &first.key)?, rest),
                None => (D::meta_value(meta)?, &[][..]),
            },
            Root::Id => (doc.id()?, &self.segments[..]),
            Root::Title => (doc.title()?, &self.segments[..]),
            Root::Model => (doc.model()?, &self.segments[..]),
        };
        for seg in rest {
            cur = match cur {
                Value::Object(map) => lookup(map, &seg.key)?,
                Value::Array(items) => items.get(seg.index?)?,
                _ => return None,
            };
        }
        if cur.is_null() { None } else { Some(cur) }
    }
}

/// What queries read of a document: the view's own fields and its metadata. Implemented by
/// JSON views `{id, title, model, meta}` and by the document index's entries, which keep no
/// JSON view (scanning thousands of them must not chase a map per field).
pub trait Doc {
    /// Where metadata fields are looked up, found once per document and shared by all the
    /// conditions tested on it (a view's `meta` value; an index entry itself).
    type Meta<'a>: Copy
    where
        Self: 'a;

    /// The view's `id`.
    fn id(&self) -> Option<&Value>;
    /// The view's `title`.
    fn title(&self) -> Option<&Value>;
    /// The view's `model`.
    fn model(&self) -> Option<&Value>;
    /// The metadata, for [`meta_field`](Self::meta_field) and
    /// [`meta_value`](Self::meta_value).
    fn meta(&self) -> Self::Meta<'_>;
    /// One top-level metadata field (`meta.<key>`); a whole-number key also indexes a metadata
    /// array.
    fn meta_field<'a>(meta: Self::Meta<'a>, key: &str) -> Option<&'a Value>;
    /// The whole metadata (the path `meta` alone, rarely asked for).
    fn meta_value<'a>(meta: Self::Meta<'a>) -> Option<&'a Value>;
}

impl Doc for Value {
    type Meta<'a> = Option<&'a Value>;

    #[inline]
    fn id(&self) -> Option<&Value> {
        field(self, "id")
    }

    #[inline]
    fn title(&self) -> Option<&Value> {
        field(self, "title")
    }

    #[inline]
    fn model(&self) -> Option<&Value> {
        field(self, "model")
    }

    #[inline]
    fn meta(&self) -> Option<&Value> {
        field(self, "meta")
    }

    #[inline]
    fn meta_field<'a>(meta: Self::Meta<'a>, key: &str) -> Option<&'a Value> {
        match meta? {
            Value::Object(map) => lookup(map, key),
            Value::Array(items) => items.get(segment_index(key)?),
            _ => None,
        }
    }

    #[inline]
    fn meta_value<'a>(meta: Self::Meta<'a>) -> Option<&'a Value> {
        meta
    }
}

/// A path segment as an array index: a whole number.
fn segment_index(s: &str) -> Option<usize> {
    if s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}
