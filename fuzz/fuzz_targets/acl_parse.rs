#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| clawboard_fuzz::acl_parse(data));
