//! Trained router networks that policies run after each small-model step
//! (R2R's divergence classifier, CITER's confidence MLP), and the
//! checkpoints they load from: published `torch.save` files read directly,
//! or converted directories.

pub mod checkpoint;
pub mod citer_net;
pub mod pickle;
pub mod r2r_net;
pub mod torch_file;

pub use checkpoint::{RouterCheckpoint, RouterError, RouterMeta};

use std::path::Path;

/// Loads a router checkpoint (file or converted directory) on the CPU with the network its
/// tensors describe (R2R or CITER) and says what it is: the check
/// `tokenrouter convert-router` runs on what it wrote.
pub fn describe(dir: &Path) -> Result<String, RouterError> {
    let mut ck = RouterCheckpoint::open(dir, tch::Device::Cpu)?;
    let threshold = ck.meta.threshold;
    let kind = if ck.has("logits_projection.weight") {
        let net = r2r_net::R2rNet::load(&mut ck)?;
        format!(
            "R2R router: hidden {}, embedding {}, top-{} logits, {} blocks",
            net.hidden_size(),
            net.embed_size(),
            net.top_k(),
            net.num_blocks()
        )
    } else if ck.has("classifier.weight") {
        let net = citer_net::CiterNet::load(&mut ck)?;
        format!("CITER router: hidden {}", net.hidden_size())
    } else {
        return Err(ck.arch_error(
            "neither an R2R router (logits_projection) nor a CITER router (mlp, classifier)",
        ));
    };
    let leftover = ck.weights.leftover();
    if !leftover.is_empty() {
        return Err(ck.arch_error(format!(
            "tensors the network does not use: {}",
            leftover.join(", ")
        )));
    }
    Ok(match threshold {
        Some(t) => format!("{kind}, threshold {t}"),
        None => format!("{kind}, no recorded threshold"),
    })
}
