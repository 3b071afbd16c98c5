// Shared by the C shims over libtorch's C++ API (cpu/onednn.cpp,
// cuda/shim.cpp): every exported function runs its body through guarded(),
// so no C++ exception crosses the C ABI into Rust. It returns 0 on success,
// or -1 with the message kept in last_error (per thread) for the shim's
// *_last_error() function.
#pragma once

#include <exception>
#include <string>

namespace tr_shim {

inline thread_local std::string last_error;

template <typename F>
int guarded(F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown C++ exception";
  }
  return -1;
}

}  // namespace tr_shim
