//! Wire format of the TCP peer transport.
//!
//! A connection is a stream of frames: a `u32` big-endian payload length,
//! then the payload. The first frame each way is a [`Handshake`] (magic,
//! protocol version, the sender's model index); every later frame is one
//! `PeerMsg` encoded with bincode 1.3 (`DefaultOptions`: varint integers,
//! trailing bytes rejected). bincode is not self-describing, so any change to
//! `PeerMsg` (or what it contains) must bump [`PROTOCOL_VERSION`]: peers of
//! different versions refuse each other at the handshake instead of
//! misreading frames.

use std::io::{self, Read};

use bincode::Options;

use super::error::TransportError;
use super::message::{ModelIdx, PeerMsg};

/// Version of the frame and message encoding; bumped on any change.
pub const PROTOCOL_VERSION: u16 = 3;

/// First bytes of every handshake ("TokenRouter Peer").
pub const MAGIC: [u8; 4] = *b"TRPR";

/// Largest payload accepted (a hand-over carries token ids only, so real
/// frames are far smaller; the cap bounds what garbage can make us buffer).
pub const MAX_FRAME_LEN: u32 = 64 << 20;

/// Bytes of the length prefix.
const LEN_BYTES: usize = 4;

/// Payload length of a handshake: magic, version, model index.
const HANDSHAKE_LEN: usize = MAGIC.len() + 2 + 2;

/// The bincode configuration of message payloads.
fn options() -> impl Options {
    bincode::DefaultOptions::new()
        .with_limit(u64::from(MAX_FRAME_LEN))
        .reject_trailing_bytes()
}

/// The first frame on a connection, each way: who is talking and in which
/// protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handshake {
    /// Protocol version of the sender.
    pub version: u16,
    /// Model index of the sender.
    pub model: ModelIdx,
}

impl Handshake {
    /// The handshake of `model` in this build's protocol version.
    pub fn new(model: ModelIdx) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            model,
        }
    }

    /// The whole frame (length prefix included).
    pub fn encode(&self) -> Vec<u8> {
        let mut frame = Vec::with_capacity(LEN_BYTES + HANDSHAKE_LEN);
        frame.extend_from_slice(&(HANDSHAKE_LEN as u32).to_be_bytes());
        frame.extend_from_slice(&MAGIC);
        frame.extend_from_slice(&self.version.to_be_bytes());
        frame.extend_from_slice(&self.model.to_be_bytes());
        frame
    }

    /// Parses a handshake payload; a wrong size, wrong magic or another
    /// protocol version is a `Codec` error.
    pub fn decode(payload: &[u8]) -> Result<Self, TransportError> {
        if payload.len() != HANDSHAKE_LEN {
            return Err(TransportError::Codec(format!(
                "handshake of {} bytes, expected {HANDSHAKE_LEN}",
                payload.len()
            )));
        }
        if payload[..4] != MAGIC {
            return Err(TransportError::Codec(format!(
                "handshake magic {:02x?} is not {MAGIC:02x?}: not a TokenRouter peer",
                &payload[..4]
            )));
        }
        let version = u16::from_be_bytes([payload[4], payload[5]]);
        if version != PROTOCOL_VERSION {
            return Err(TransportError::Codec(format!(
                "peer speaks protocol version {version}, this build speaks {PROTOCOL_VERSION}"
            )));
        }
        Ok(Self {
            version,
            model: u16::from_be_bytes([payload[6], payload[7]]),
        })
    }
}

/// Encodes `msg` as a whole frame (length prefix included). Messages larger
/// than [`MAX_FRAME_LEN`] are a `Codec` error.
pub fn encode_msg(msg: &PeerMsg) -> Result<Vec<u8>, TransportError> {
    let too_big = |e: bincode::Error| {
        TransportError::Codec(format!(
            "cannot encode message for request {}: {e}",
            msg.rid()
        ))
    };
    let len = options().serialized_size(msg).map_err(too_big)?;
    let mut frame = Vec::with_capacity(LEN_BYTES + len as usize);
    frame.extend_from_slice(&(len as u32).to_be_bytes());
    options().serialize_into(&mut frame, msg).map_err(too_big)?;
    Ok(frame)
}

/// Decodes a message payload (without its length prefix).
pub fn decode_msg(payload: &[u8]) -> Result<PeerMsg, TransportError> {
    options()
        .deserialize(payload)
        .map_err(|e| TransportError::Codec(format!("undecodable message: {e}")))
}

/// Why no frame could be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The connection failed (reset, timed out, ...).
    #[error("connection failed: {0}")]
    Io(#[from] io::Error),
    /// The bytes are not a frame: always a `TransportError::Codec`.
    #[error(transparent)]
    Bad(#[from] TransportError),
}

/// Reads one frame's payload. `Ok(None)` when the stream ends cleanly
/// between frames; a stream ending inside a frame, an empty frame or one
/// above [`MAX_FRAME_LEN`] is `Bad`. The buffer grows with the bytes that
/// actually arrive, so a lying length prefix cannot make us allocate it.
pub fn read_frame<R: Read>(r: &mut R) -> Result<Option<Vec<u8>>, FrameError> {
    let mut prefix = [0u8; LEN_BYTES];
    let got = read_full(r, &mut prefix)?;
    if got == 0 {
        return Ok(None);
    }
    if got < LEN_BYTES {
        return Err(bad(format!(
            "truncated frame: stream ended after {got} of {LEN_BYTES} length bytes"
        )));
    }
    let len = u32::from_be_bytes(prefix);
    if len == 0 {
        return Err(bad("empty frame".to_string()));
    }
    if len > MAX_FRAME_LEN {
        return Err(bad(format!(
            "frame of {len} bytes exceeds the {MAX_FRAME_LEN}-byte limit"
        )));
    }
    let mut payload = Vec::new();
    r.take(u64::from(len)).read_to_end(&mut payload)?;
    if payload.len() < len as usize {
        return Err(bad(format!(
            "truncated frame: stream ended after {} of {len} payload bytes",
            payload.len()
        )));
    }
    Ok(Some(payload))
}

fn bad(reason: String) -> FrameError {
    FrameError::Bad(TransportError::Codec(reason))
}

/// Fills `buf` unless the stream ends first; returns the bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::peer::message::{PeerReq, RequestMeta};
    use crate::sampling::{SamplingParams, TokenLogprobs};

    /// One message of each variant, with non-default contents everywhere.
    fn every_variant() -> Vec<PeerMsg> {
        let sampling = SamplingParams {
            temperature: 0.7,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.05,
            seed: Some(1234),
            max_tokens: 512,
            stop: vec!["</s>".into(), "\n\nUser:".into(), "é∑".into()],
            stop_token_ids: vec![2, 151_645],
            ignore_eos: true,
            logprobs: Some(3),
        };
        let lp = TokenLogprobs {
            token: 7,
            logprob: -0.25,
            rank: 2,
            top: vec![(3, -0.1), (7, -0.25)],
        };
        vec![
            PeerMsg::Req(PeerReq {
                rid: u64::MAX - 3,
                from: 0,
                to: 2,
                loc: 77,
                tokens: vec![0, 1, 151_935, u32::MAX],
                finished: false,
                budget: 435,
                n_active: 9,
                meta: Some(RequestMeta {
                    sampling,
                    seed: 0xdead_beef_cafe,
                    pinned: true,
                    route_seed: u64::MAX,
                }),
                logprobs: vec![],
                next: None,
            }),
            PeerMsg::Req(PeerReq {
                rid: 5,
                from: 2,
                to: 0,
                loc: 0,
                tokens: vec![],
                finished: true,
                budget: 0,
                n_active: 0,
                meta: None,
                logprobs: vec![lp.clone()],
                next: Some(1),
            }),
            PeerMsg::Progress {
                rid: 6,
                from: 1,
                loc: 90,
                tokens: vec![7, 8],
                logprobs: vec![lp],
            },
            PeerMsg::Release {
                rid: 42,
                from: 1,
                n_active: 3,
            },
            PeerMsg::Failed {
                rid: 43,
                from: u16::MAX,
                reason: "KV pool exhausted at model 1".into(),
            },
        ]
    }

    fn payload_of(frame: &[u8]) -> &[u8] {
        let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(frame.len(), 4 + len, "length prefix matches the payload");
        &frame[4..]
    }

    fn bad_frame(bytes: &[u8]) -> String {
        match read_frame(&mut Cursor::new(bytes.to_vec())) {
            Err(FrameError::Bad(TransportError::Codec(reason))) => reason,
            other => panic!("expected a Codec error, got {other:?}"),
        }
    }

    #[test]
    fn every_variant_round_trips() {
        for msg in every_variant() {
            let frame = encode_msg(&msg).unwrap();
            let payload = read_frame(&mut Cursor::new(frame.clone()))
                .unwrap()
                .unwrap();
            assert_eq!(payload, payload_of(&frame));
            assert_eq!(decode_msg(&payload).unwrap(), msg);
        }
    }

    #[test]
    fn frames_read_back_to_back_then_clean_end() {
        let msgs = every_variant();
        let mut stream = Vec::new();
        for m in &msgs {
            stream.extend(encode_msg(m).unwrap());
        }
        let mut r = Cursor::new(stream);
        for m in &msgs {
            let payload = read_frame(&mut r).unwrap().unwrap();
            assert_eq!(&decode_msg(&payload).unwrap(), m);
        }
        assert!(read_frame(&mut r).unwrap().is_none());
    }

    #[test]
    fn truncated_payloads_are_errors() {
        for msg in every_variant() {
            let frame = encode_msg(&msg).unwrap();
            let payload = payload_of(&frame);
            for cut in 0..payload.len() {
                let err = decode_msg(&payload[..cut]).unwrap_err();
                assert!(matches!(err, TransportError::Codec(_)), "{err:?}");
            }
            let mut longer = payload.to_vec();
            longer.push(0);
            assert!(matches!(decode_msg(&longer), Err(TransportError::Codec(_))));
        }
    }

    #[test]
    fn truncated_frames_are_errors() {
        let frame = encode_msg(&every_variant()[0]).unwrap();
        for cut in 1..frame.len() {
            let reason = bad_frame(&frame[..cut]);
            assert!(reason.contains("truncated"), "{cut}: {reason}");
        }
    }

    #[test]
    fn oversize_and_empty_frames_are_errors() {
        let mut huge = (MAX_FRAME_LEN + 1).to_be_bytes().to_vec();
        huge.extend([0u8; 16]);
        assert!(bad_frame(&huge).contains("exceeds"));
        assert!(bad_frame(&u32::MAX.to_be_bytes()).contains("exceeds"));
        assert!(bad_frame(&[0, 0, 0, 0, 1]).contains("empty"));
        // A length at the limit with few bytes behind it: no 64 MiB buffer,
        // just a truncation error.
        let mut lying = MAX_FRAME_LEN.to_be_bytes().to_vec();
        lying.extend([1u8; 8]);
        assert!(bad_frame(&lying).contains("after 8 of"));
    }

    #[test]
    fn garbage_payloads_are_errors() {
        for garbage in [
            vec![0xffu8; 20],
            vec![9u8, 1, 2, 3],
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            // Failed (rid 5, from 1) whose reason claims 2 GiB of text.
            vec![3, 5, 1, 0xfc, 0xff, 0xff, 0xff, 0x7f],
        ] {
            assert!(
                matches!(decode_msg(&garbage), Err(TransportError::Codec(_))),
                "{garbage:?}"
            );
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..20_000 {
            let len = rng.random_range(0..64);
            let bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            // Either outcome is fine; neither may panic or allocate wildly.
            let _ = decode_msg(&bytes);
            let _ = read_frame(&mut Cursor::new(bytes.clone()));
            let _ = Handshake::decode(&bytes);
        }
    }

    #[test]
    fn handshake_round_trips_and_rejects_strangers() {
        let frame = Handshake::new(3).encode();
        let payload = read_frame(&mut Cursor::new(frame)).unwrap().unwrap();
        assert_eq!(
            Handshake::decode(&payload).unwrap(),
            Handshake {
                version: PROTOCOL_VERSION,
                model: 3
            }
        );

        let mut wrong_magic = payload.clone();
        wrong_magic[0] = b'X';
        let err = Handshake::decode(&wrong_magic).unwrap_err();
        assert!(err.to_string().contains("magic"), "{err}");

        let mut wrong_version = payload.clone();
        wrong_version[4..6].copy_from_slice(&(PROTOCOL_VERSION + 1).to_be_bytes());
        let err = Handshake::decode(&wrong_version).unwrap_err();
        let expected = format!("version {}", PROTOCOL_VERSION + 1);
        assert!(err.to_string().contains(&expected), "{err}");

        let err = Handshake::decode(&payload[..7]).unwrap_err();
        assert!(matches!(err, TransportError::Codec(_)));
        // A message frame where a handshake belongs.
        let msg = encode_msg(&every_variant()[2]).unwrap();
        assert!(Handshake::decode(payload_of(&msg)).is_err());
    }
}
