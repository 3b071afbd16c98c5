// tokenrouter CPU shim: a C ABI over two operators libtorch registers but
// tch does not expose, the packed-weight linear of oneDNN that PyTorch's
// own CPU compiler paths (inductor's weight prepacking) use:
//
//   mkldnn::_reorder_linear_weight(Tensor self, int? batch_size) -> Tensor
//   mkldnn::_linear_pointwise(Tensor X, Tensor W, Tensor? B, str attr,
//                             Scalar?[] scalars, str? algorithm) -> Tensor
//
// Called through the dispatcher by name (boxed), so no ATen operator header
// is needed and the build stays a few seconds. Built by subserver/build.rs
// into a static library; tensors cross as `at::Tensor*`, the handle tch's
// `Tensor` owns. Every function catches C++ exceptions and returns 0 on
// success, or -1 with the message kept for tr_onednn_last_error() (per
// thread).

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "../shim/guarded.h"

#include <optional>
#include <string>

using tr_shim::guarded;
using tr_shim::last_error;

namespace {
c10::OperatorHandle find(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}
}  // namespace

extern "C" {

// Bumped when a signature changes.
int tr_onednn_version() { return 1; }

const char* tr_onednn_last_error() { return last_error.c_str(); }

// `w` ([out, in]) reordered into oneDNN's blocked layout, with no batch-size
// hint (one packing serves every batch size). New tensor owned by the caller.
int tr_onednn_pack(const at::Tensor* w, at::Tensor** out) {
  return guarded([&] {
    static const c10::OperatorHandle op = find("mkldnn::_reorder_linear_weight");
    torch::jit::Stack stack{c10::IValue(*w), c10::IValue()};
    op.callBoxed(&stack);
    *out = new at::Tensor(stack.at(0).toTensor());
  });
}

// `x · Wᵀ (+ bias)` with `packed` from tr_onednn_pack; `bias` may be null.
// `x` is `[..., in]`, any strides. New tensor owned by the caller.
int tr_onednn_linear(const at::Tensor* x, const at::Tensor* packed, const at::Tensor* bias,
                     at::Tensor** out) {
  return guarded([&] {
    static const c10::OperatorHandle op = find("mkldnn::_linear_pointwise");
    torch::jit::Stack stack{
        c10::IValue(*x),
        c10::IValue(*packed),
        bias != nullptr ? c10::IValue(*bias) : c10::IValue(),
        c10::IValue(std::string("none")),
        c10::IValue(c10::List<std::optional<at::Scalar>>()),
        c10::IValue(),
    };
    op.callBoxed(&stack);
    *out = new at::Tensor(stack.at(0).toTensor());
  });
}

}  // extern "C"
