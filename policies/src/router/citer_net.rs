//! The CITER router: a confidence that the small model's token is good
//! enough, from its final hidden state `h` (`H` wide).
//!
//! ```text
//! x = ReLU(BN(mlp.0(h)))      H -> 2H   (mlp.1: BatchNorm1d, eval statistics)
//! x = ReLU(BN(mlp.4(x)))      2H -> H   (mlp.5; mlp.3/mlp.7 are Dropout, inactive)
//! c = sigmoid(classifier(x))  H -> 1
//! ```
//!
//! The state-dict names are those of `nn.Sequential(Linear, BatchNorm1d,
//! ReLU, Dropout, Linear, BatchNorm1d, ReLU, Dropout)` as `mlp` plus a
//! `classifier` Linear (tests/python/router_ref.py builds it). The
//! BatchNorm epsilon is `init_args.bn_eps` (default PyTorch's 1e-5).

use tch::{Kind, Tensor};

use crate::router::checkpoint::{BatchNorm, Linear, RouterCheckpoint, RouterError};

/// A loaded CITER router.
pub struct CiterNet {
    hidden_size: i64,
    fc1: Linear,
    bn1: BatchNorm,
    fc2: Linear,
    bn2: BatchNorm,
    classifier: Linear,
}

impl CiterNet {
    /// Builds the network from a converted checkpoint, checking every shape.
    pub fn load(ck: &mut RouterCheckpoint) -> Result<Self, RouterError> {
        let eps = ck.init_f64("bn_eps")?.unwrap_or(1e-5);
        let fc1 = ck.linear("mlp.0")?;
        let h = fc1.in_features();
        ck.check_init("hidden_size", h as usize)?;
        let mid = fc1.out_features();
        let bn1 = ck.batch_norm("mlp.1", mid, eps)?;
        let fc2 = ck.linear("mlp.4")?;
        if fc2.in_features() != mid || fc2.out_features() != h {
            return Err(ck.arch_error(format!(
                "mlp.4 is [{}, {}], expected [{h}, {mid}]",
                fc2.out_features(),
                fc2.in_features()
            )));
        }
        let bn2 = ck.batch_norm("mlp.5", h, eps)?;
        let classifier = ck.linear("classifier")?;
        if classifier.in_features() != h || classifier.out_features() != 1 {
            return Err(ck.arch_error(format!(
                "classifier is [{}, {}], expected [1, {h}]",
                classifier.out_features(),
                classifier.in_features()
            )));
        }
        Ok(Self {
            hidden_size: h,
            fc1,
            bn1,
            fc2,
            bn2,
            classifier,
        })
    }

    /// Width of the hidden state it reads.
    pub fn hidden_size(&self) -> i64 {
        self.hidden_size
    }

    /// Confidences `[B]` from hidden states `[B, H]` (computed in float32
    /// on the router's device).
    pub fn forward(&self, hidden: &Tensor) -> Result<Tensor, tch::TchError> {
        let _guard = tch::no_grad_guard();
        let device = self.classifier.weight.device();
        let h = hidden.f_to_device(device)?.f_to_kind(Kind::Float)?;
        let x = self.bn1.forward(&self.fc1.forward(&h)?)?.f_relu()?;
        let x = self.bn2.forward(&self.fc2.forward(&x)?)?.f_relu()?;
        self.classifier.forward(&x)?.f_squeeze_dim(-1)?.f_sigmoid()
    }
}
