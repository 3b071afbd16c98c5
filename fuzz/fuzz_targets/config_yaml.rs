#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    subserver::fuzz_entry::config_yaml(data);
});
