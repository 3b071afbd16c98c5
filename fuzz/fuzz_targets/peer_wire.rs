#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    subserver::fuzz_entry::peer_wire(data);
});
