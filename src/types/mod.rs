//! Identifiers, section types, stored records and the result shapes of the spec.

pub mod kbid;
pub mod records;
pub mod requests;
pub mod results;
pub mod section_type;
pub mod stored_forms;
pub mod validate;

pub use kbid::{is_kbid, kbid_of};
pub use requests::{LearnRequest, RecallRequest};
pub use results::*;
