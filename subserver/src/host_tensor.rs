//! A CPU tensor's memory borrowed as a Rust slice, for the kernels of ours
//! that run on the host (`kernels::paged_attention`).
//!
//! The borrow is only as exclusive as the caller makes it: a `tch::Tensor`
//! is a shared handle, so another handle to the same storage could write
//! while the slice lives. The decoder holds these slices only inside one
//! kernel call, during which nothing else touches those tensors.

use tch::{Device, Kind, Tensor};

/// A tensor a host kernel cannot borrow as given (wrong device, dtype or
/// strides, or a part outside it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("host tensor: {0}")]
pub struct HostTensorError(pub String);

/// An element type a host slice may have.
pub trait HostElem: Copy {
    /// The libtorch dtype it matches.
    const KIND: Kind;
}

impl HostElem for f32 {
    const KIND: Kind = Kind::Float;
}

impl HostElem for half::bf16 {
    const KIND: Kind = Kind::BFloat16;
}

impl HostElem for i64 {
    const KIND: Kind = Kind::Int64;
}

fn check<T: HostElem>(t: &Tensor) -> Result<usize, HostTensorError> {
    if t.device() != Device::Cpu || t.kind() != T::KIND || !t.is_contiguous() {
        return Err(HostTensorError(format!(
            "a host kernel needs a contiguous {:?} CPU tensor, got {:?} on {:?}{}",
            T::KIND,
            t.kind(),
            t.device(),
            if t.is_contiguous() { "" } else { " (strided)" }
        )));
    }
    Ok(t.numel())
}

/// The elements of `t` (contiguous, on the CPU, of dtype `T::KIND`).
pub fn host_slice<T: HostElem>(t: &Tensor) -> Result<&[T], HostTensorError> {
    let n = check::<T>(t)?;
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: `check` proved a contiguous CPU tensor of `n` elements of
    // type `T`; its storage outlives the borrow of `t` (see module docs).
    #[allow(unsafe_code)] // FFI: libtorch's data pointer.
    Ok(unsafe { std::slice::from_raw_parts(t.data_ptr() as *const T, n) })
}

/// The elements of `t`, writable (as [`host_slice`]).
pub fn host_slice_mut<T: HostElem>(t: &mut Tensor) -> Result<&mut [T], HostTensorError> {
    let n = check::<T>(t)?;
    if n == 0 {
        return Ok(&mut []);
    }
    // SAFETY: as in `host_slice`; the `&mut` borrow of this handle is the
    // only one the caller holds (see module docs).
    #[allow(unsafe_code)] // FFI: libtorch's data pointer.
    Ok(unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut T, n) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_the_tensor_itself() {
        let mut t = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
        host_slice_mut::<f32>(&mut t).unwrap()[1] = 9.0;
        assert_eq!(host_slice::<f32>(&t).unwrap(), &[1.0, 9.0, 3.0]);
        let b = t.to_kind(Kind::BFloat16);
        assert_eq!(host_slice::<half::bf16>(&b).unwrap()[1].to_f32(), 9.0);
    }

    #[test]
    fn wrong_dtype_or_strides_are_errors() {
        let t = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).view([2, 2]);
        assert!(host_slice::<half::bf16>(&t).is_err());
        let err = host_slice::<f32>(&t.transpose(0, 1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("strided"), "{err}");
    }
}
