//! Whole-manager invariant tests: a seeded random walk of many thousands of
//! operations and an exhaustive walk of every short operation sequence.
//!
//! Both drive a [`Sim`] that stands in for the tensor storage with one
//! fingerprint per slot: writing position `p` stores a hash of the tokens
//! `0..=p`, as real KV depends on the whole prefix. Reading back every live
//! request's written positions after each operation proves that no block
//! held by a request (paused or not) was reused, and checking reused prefix
//! blocks at admission proves the prefix cache only hands out blocks that
//! hold exactly that prefix.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{BlockId, KvError, KvManager};

/// Hash of each prefix `seq[..=p]`.
fn prefix_fingerprints(seq: &[u32]) -> Vec<u64> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    seq.iter()
        .map(|&t| {
            h = (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01b3);
            h ^= h >> 29;
            h
        })
        .collect()
}

/// A request as the scheduler sees it.
#[derive(Debug, Clone)]
struct Live {
    /// Prompt followed by the tokens it will generate.
    seq: Vec<u32>,
    fingerprints: Vec<u64>,
    /// Positions whose KV is written.
    computed: usize,
    /// Step until which the scheduler leaves it alone (sent to a peer).
    paused_until: u64,
}

#[derive(Debug, Clone)]
enum Op {
    Admit {
        rid: u64,
        seq: Vec<u32>,
        prompt_len: usize,
    },
    /// Reserve up to `computed + extra` positions (capped at the sequence).
    Reserve {
        rid: u64,
        extra: usize,
    },
    /// Write KV for up to `extra` more positions within the reservation.
    Compute {
        rid: u64,
        extra: usize,
    },
    Release {
        rid: u64,
    },
    Free {
        rid: u64,
    },
    Evict {
        n: usize,
    },
    Pause {
        rid: u64,
        until: u64,
    },
}

/// Everything an operation that fails must leave unchanged.
#[derive(Debug, PartialEq)]
struct Snapshot {
    free: usize,
    evictable: usize,
    cached: usize,
    tables: BTreeMap<u64, Vec<BlockId>>,
}

#[derive(Debug, Clone)]
struct Sim {
    kv: KvManager,
    live: BTreeMap<u64, Live>,
    /// One fingerprint per slot: the stand-in for the KV tensors.
    content: Vec<Option<u64>>,
}

impl Sim {
    fn new(num_blocks: usize, block_size: usize) -> Self {
        Self {
            kv: KvManager::new(num_blocks, block_size, true).unwrap(),
            live: BTreeMap::new(),
            content: vec![None; num_blocks * block_size],
        }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            free: self.kv.num_free_blocks(),
            evictable: self.kv.num_evictable_blocks(),
            cached: self.kv.num_cached_blocks(),
            tables: self
                .live
                .keys()
                .map(|&rid| (rid, self.kv.block_table(rid).unwrap().blocks().to_vec()))
                .collect(),
        }
    }

    fn slots(&self, rid: u64, start: usize, end: usize) -> Vec<i64> {
        let mut out = Vec::new();
        self.kv.slots(rid, start, end, &mut out).unwrap();
        assert_eq!(out.len(), end - start);
        out
    }

    /// Asserts that the KV of positions `0..end` of `rid` is `live`'s.
    fn assert_content(&self, rid: u64, live: &Live, end: usize) {
        for (p, slot) in self.slots(rid, 0, end).into_iter().enumerate() {
            assert_eq!(
                self.content[slot as usize],
                Some(live.fingerprints[p]),
                "request {rid} position {p} slot {slot} lost its KV"
            );
        }
    }

    fn apply(&mut self, op: &Op) {
        let before = self.snapshot();
        match *op {
            Op::Admit {
                rid,
                ref seq,
                prompt_len,
            } => {
                if self.live.contains_key(&rid) {
                    assert_eq!(
                        self.kv.admit(rid, &seq[..prompt_len]).unwrap_err(),
                        KvError::DuplicateRequest { rid }
                    );
                    assert_eq!(self.snapshot(), before);
                    return;
                }
                let cached = self.kv.admit(rid, &seq[..prompt_len]).unwrap();
                let bs = self.kv.block_size();
                assert_eq!(cached % bs, 0);
                assert!(cached < prompt_len, "the whole prompt was reused");
                assert_eq!(self.kv.block_table(rid).unwrap().num_positions(), cached);
                let live = Live {
                    seq: seq.clone(),
                    fingerprints: prefix_fingerprints(seq),
                    computed: cached,
                    paused_until: 0,
                };
                self.assert_content(rid, &live, cached);
                self.live.insert(rid, live);
            }
            Op::Reserve { rid, extra } => {
                let target = self
                    .live
                    .get(&rid)
                    .map_or(extra, |l| (l.computed + extra).min(l.seq.len()));
                let needed = self.kv.blocks_needed(rid, target);
                let predicted = self.kv.can_reserve(rid, target);
                match self.kv.reserve(rid, target) {
                    Ok(()) => {
                        assert!(predicted);
                        let table = self.kv.block_table(rid).unwrap().blocks().to_vec();
                        let old = &before.tables[&rid];
                        assert_eq!(
                            &table[..old.len()],
                            &old[..],
                            "reserve changed existing blocks"
                        );
                        assert_eq!(table.len(), old.len() + needed);
                        assert!(table.len() * self.kv.block_size() >= target);
                    }
                    Err(e) => {
                        if self.live.contains_key(&rid) {
                            assert!(!predicted);
                            assert_eq!(
                                e,
                                KvError::OutOfBlocks {
                                    needed,
                                    available: before.free + before.evictable
                                }
                            );
                        } else {
                            assert_eq!(e, KvError::UnknownRequest { rid });
                        }
                        assert_eq!(self.snapshot(), before);
                    }
                }
            }
            Op::Compute { rid, extra } => {
                let Some(live) = self.live.get(&rid) else {
                    return;
                };
                let reserved = self.kv.block_table(rid).unwrap().num_positions();
                assert_eq!(
                    self.kv
                        .slots(rid, 0, reserved + 1, &mut Vec::new())
                        .unwrap_err(),
                    KvError::NotReserved {
                        rid,
                        end: reserved + 1,
                        reserved
                    }
                );
                let start = live.computed;
                let end = (start + extra).min(reserved).min(live.seq.len());
                let fingerprints = live.fingerprints[start..end].to_vec();
                for (slot, fp) in self.slots(rid, start, end).into_iter().zip(fingerprints) {
                    self.content[slot as usize] = Some(fp);
                }
                self.live.get_mut(&rid).unwrap().computed = end;
            }
            Op::Release { rid } | Op::Free { rid } => {
                let result = match (op, self.live.get(&rid)) {
                    (Op::Release { .. }, Some(live)) => {
                        self.kv.release(rid, &live.seq[..live.computed])
                    }
                    (Op::Release { .. }, None) => self.kv.release(rid, &[1]),
                    _ => self.kv.free(rid),
                };
                if self.live.remove(&rid).is_some() {
                    result.unwrap();
                    assert!(!self.kv.contains(rid));
                } else {
                    assert_eq!(result.unwrap_err(), KvError::UnknownRequest { rid });
                    assert_eq!(self.snapshot(), before);
                }
            }
            Op::Evict { n } => {
                let freed = self.kv.evict(n).unwrap();
                assert_eq!(freed, n.min(before.evictable));
                let after = self.snapshot();
                assert_eq!(after.free, before.free + freed);
                assert_eq!(
                    after.tables, before.tables,
                    "eviction touched a request's blocks"
                );
            }
            Op::Pause { rid, until } => {
                if let Some(live) = self.live.get_mut(&rid) {
                    live.paused_until = until;
                }
            }
        }
    }

    /// The invariants that hold between any two operations.
    fn check(&self) {
        self.kv.check_consistency().unwrap();
        assert_eq!(self.kv.num_requests(), self.live.len());
        for (&rid, live) in &self.live {
            assert!(self.kv.contains(rid));
            self.assert_content(rid, live, live.computed);
        }
        let usage = self.kv.usage();
        assert!((0.0..=1.0).contains(&usage));
        assert_eq!(
            self.kv.num_available_blocks(),
            self.kv.num_free_blocks() + self.kv.num_evictable_blocks()
        );
        // The evictable count is exactly what full eviction frees.
        let mut evicted = self.kv.clone();
        assert_eq!(evicted.evict_all().unwrap(), self.kv.num_evictable_blocks());
        assert_eq!(evicted.num_evictable_blocks(), 0);
    }

    /// Ending every request, however, then evicting everything returns the
    /// whole pool.
    fn assert_teardown_frees_everything(&self) {
        let mut sim = self.clone();
        let rids: Vec<u64> = sim.live.keys().copied().collect();
        for (i, rid) in rids.into_iter().enumerate() {
            sim.apply(&if i % 2 == 0 {
                Op::Release { rid }
            } else {
                Op::Free { rid }
            });
        }
        sim.kv.evict_all().unwrap();
        sim.kv.check_consistency().unwrap();
        assert_eq!(sim.kv.num_free_blocks(), sim.kv.num_blocks());
        assert_eq!(sim.kv.num_cached_blocks(), 0);
        assert_eq!(sim.kv.usage(), 0.0);
    }
}

/// Draws the next operation: mostly work on runnable requests, sometimes
/// a pause, an eviction, or an operation on an unknown request.
fn random_op(
    sim: &Sim,
    rng: &mut ChaCha8Rng,
    step: u64,
    next_rid: &mut u64,
    families: &[Vec<u32>],
) -> Op {
    let bs = sim.kv.block_size();
    let runnable: Vec<u64> = sim
        .live
        .iter()
        .filter(|(_, l)| l.paused_until <= step)
        .map(|(&r, _)| r)
        .collect();
    let roll = rng.random_range(0..100);
    if roll < 3 {
        let rid = *next_rid + 1000;
        return match rng.random_range(0..3) {
            0 => Op::Reserve { rid, extra: bs },
            1 => Op::Release { rid },
            _ => Op::Free { rid },
        };
    }
    if roll < 8 {
        return Op::Evict {
            n: rng.random_range(0..4),
        };
    }
    if runnable.is_empty() || (roll < 28 && sim.live.len() < 12) {
        // Shared prefixes: a family prefix, then a tail from a tiny alphabet
        // so tails collide too.
        let family = &families[rng.random_range(0..families.len())];
        let mut seq = family[..rng.random_range(0..=family.len())].to_vec();
        let tail = rng.random_range(1..=24);
        seq.extend((0..tail).map(|_| rng.random_range(0..3)));
        let prompt_len = rng.random_range(1..=seq.len());
        *next_rid += 1;
        if rng.random_range(0..50) == 0 {
            if let Some(&rid) = sim.live.keys().next() {
                return Op::Admit {
                    rid,
                    seq,
                    prompt_len,
                };
            }
        }
        return Op::Admit {
            rid: *next_rid,
            seq,
            prompt_len,
        };
    }
    let rid = runnable[rng.random_range(0..runnable.len())];
    match roll {
        28..=55 => Op::Reserve {
            rid,
            extra: rng.random_range(0..=3 * bs),
        },
        56..=85 => Op::Compute {
            rid,
            extra: rng.random_range(1..=2 * bs),
        },
        86..=91 => Op::Release { rid },
        92..=94 => Op::Free { rid },
        _ => Op::Pause {
            rid,
            until: step + rng.random_range(50..500),
        },
    }
}

fn random_walk(seed: u64, num_blocks: usize, block_size: usize, steps: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let families: Vec<Vec<u32>> = (0..4)
        .map(|_| {
            (0..12 * block_size)
                .map(|_| rng.random_range(100..50_000))
                .collect()
        })
        .collect();
    let mut sim = Sim::new(num_blocks, block_size);
    let mut next_rid = 0;
    let mut reused_while_paused = false;
    for step in 0..steps {
        let op = random_op(&sim, &mut rng, step, &mut next_rid, &families);
        sim.apply(&op);
        sim.check();
        reused_while_paused |= sim
            .live
            .values()
            .any(|l| l.paused_until > step && l.computed > 0);
        if step % 1000 == 0 {
            sim.assert_teardown_frees_everything();
        }
    }
    sim.assert_teardown_frees_everything();
    // The walk must have exercised what it claims to.
    let stats = sim.kv.prefix_cache_stats();
    assert!(
        stats.hit_tokens > 0,
        "seed {seed}: no prefix was ever reused"
    );
    assert!(
        reused_while_paused,
        "seed {seed}: no request was paused with KV"
    );
}

#[test]
fn random_walk_keeps_every_invariant() {
    for seed in 0..4 {
        random_walk(seed, 40, 4, 20_000);
    }
    random_walk(10, 64, 1, 10_000);
    random_walk(11, 30, 3, 10_000);
    random_walk(12, 24, 16, 10_000);
}

#[test]
fn random_walk_is_reproducible() {
    let run = |seed| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let families = vec![(0..16).collect::<Vec<u32>>()];
        let mut sim = Sim::new(16, 2);
        let mut next_rid = 0;
        let mut trace = Vec::new();
        for step in 0..500 {
            let op = random_op(&sim, &mut rng, step, &mut next_rid, &families);
            sim.apply(&op);
            trace.push((sim.snapshot().tables, sim.kv.num_free_blocks()));
        }
        trace
    };
    assert_eq!(run(3), run(3));
}

/// Every sequence of up to `depth` operations from a small alphabet over a
/// pool of 4 blocks of 2 slots, two request ids and two prompts that share
/// a prefix. After each prefix of each sequence the invariants hold and
/// tearing everything down returns all 4 blocks.
#[test]
fn exhaustive_short_sequences_never_leak() {
    let long = vec![1, 2, 3, 4, 5, 6];
    let branch = vec![1, 2, 3, 4, 7, 8];
    let other = vec![9, 9, 9, 9, 9, 9];
    let mut alphabet: Vec<Vec<Op>> = vec![vec![Op::Evict { n: 1 }]];
    for rid in [1, 2] {
        alphabet.push(vec![Op::Admit {
            rid,
            seq: long.clone(),
            prompt_len: 3,
        }]);
        // A prompt of whole blocks, all cached after `long` ran: the last
        // block must still be computed.
        alphabet.push(vec![Op::Admit {
            rid,
            seq: long.clone(),
            prompt_len: 4,
        }]);
        alphabet.push(vec![Op::Admit {
            rid,
            seq: branch.clone(),
            prompt_len: 5,
        }]);
        // Shares nothing, so growing it must evict under pressure.
        alphabet.push(vec![Op::Admit {
            rid,
            seq: other.clone(),
            prompt_len: 3,
        }]);
        // Grow: reserve then write, as a decode or prefill step does.
        alphabet.push(vec![
            Op::Reserve { rid, extra: 1 },
            Op::Compute { rid, extra: 1 },
        ]);
        alphabet.push(vec![
            Op::Reserve { rid, extra: 5 },
            Op::Compute { rid, extra: 5 },
        ]);
        // Reserved but not yet written.
        alphabet.push(vec![Op::Reserve { rid, extra: 3 }]);
        alphabet.push(vec![Op::Release { rid }]);
        alphabet.push(vec![Op::Free { rid }]);
    }

    #[derive(Default)]
    struct Seen {
        visited: usize,
        hits: u64,
        evicted_on_reserve: bool,
    }

    fn explore(sim: &Sim, alphabet: &[Vec<Op>], depth: usize, seen: &mut Seen) {
        seen.visited += 1;
        sim.check();
        sim.assert_teardown_frees_everything();
        seen.hits = seen.hits.max(sim.kv.prefix_cache_stats().hit_tokens);
        if depth == 0 {
            return;
        }
        for step in alphabet {
            let mut next = sim.clone();
            for op in step {
                let cached = next.kv.num_cached_blocks();
                next.apply(op);
                seen.evicted_on_reserve |=
                    matches!(op, Op::Reserve { .. }) && next.kv.num_cached_blocks() < cached;
            }
            explore(&next, alphabet, depth - 1, seen);
        }
    }

    let mut seen = Seen::default();
    explore(&Sim::new(4, 2), &alphabet, 5, &mut seen);
    let n = alphabet.len();
    assert_eq!(seen.visited, (0..=5).map(|d| n.pow(d)).sum::<usize>());
    assert!(seen.hits > 0, "no sequence reused a cached prefix");
    assert!(seen.evicted_on_reserve, "no sequence evicted to make room");
}
