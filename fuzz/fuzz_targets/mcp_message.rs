#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kbdb_fuzz::harness::mcp_message(data);
});
