//! A request that ends normally ([`KvManager::finish`], what the scheduler
//! and the engine call): every failure is counted once and the request's
//! blocks come back whatever failed.

use super::*;

/// Request 1 admitted and reserved over `prompt`, in a pool of 4 blocks of 2.
fn one_request(prompt: &[u32]) -> KvManager {
    let mut kv = KvManager::new(4, 2, true).unwrap();
    kv.admit(1, prompt).unwrap();
    kv.reserve(1, prompt.len() + 1).unwrap();
    kv
}

#[test]
fn a_refused_release_is_counted_once_and_still_frees_the_blocks() {
    let mut kv = one_request(&[1, 2, 3]);
    // More tokens than were reserved: the release is refused (a bug).
    kv.finish(1, &[1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(kv.free_errors(), 1, "the refused release is counted once");
    assert!(!kv.contains(1), "the request is gone");
    kv.evict_all().unwrap();
    assert_eq!(kv.num_free_blocks(), 4, "every block came back");
    kv.check_consistency().unwrap();
}

#[test]
fn a_failed_free_inside_a_release_is_counted_once() {
    let mut kv = one_request(&[1, 2, 3]);
    // A block of the request already went back (a double free to come).
    let block = kv.block_table(1).unwrap().blocks()[1];
    assert!(kv.allocator.release(block).unwrap());
    kv.finish(1, &[1, 2]);
    assert_eq!(
        kv.free_errors(),
        1,
        "one failed free, not a second one for a retry on a request already gone"
    );
    assert!(!kv.contains(1));
}

#[test]
fn a_clean_finish_counts_nothing_and_caches_the_written_blocks() {
    let mut kv = one_request(&[1, 2, 3]);
    kv.finish(1, &[1, 2, 3, 4]);
    assert_eq!(kv.free_errors(), 0);
    assert_eq!(kv.num_cached_blocks(), 2);
    kv.check_consistency().unwrap();
}
