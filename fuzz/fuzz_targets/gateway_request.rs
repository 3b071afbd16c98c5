#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    gateway::fuzz_entry::request(data);
});
