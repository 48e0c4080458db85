// PyTorch's deterministic-algorithms switch, which tch does not expose
// (torch.use_deterministic_algorithms in Python). Compiled by build.rs with the `cc`
// crate against the headers of the libtorch that torch-sys links, only when the
// `train` feature is on. No exception crosses into Rust: failures return false.
#include <ATen/Context.h>

extern "C" bool burnin_set_deterministic(bool on) {
  try {
    at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/false);
    at::globalContext().setDeterministicCuDNN(on);
    if (on) {
      at::globalContext().setBenchmarkCuDNN(false);
    }
    return true;
  } catch (...) {
    return false;
  }
}

extern "C" bool burnin_deterministic_enabled() {
  try {
    return at::globalContext().deterministicAlgorithms();
  } catch (...) {
    return false;
  }
}
