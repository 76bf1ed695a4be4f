// portable_rnn's own cuDNN RNN call through the XLA FFI: LSTM (with a projection), GRU and the
// tanh/relu RNN, in float32, float16 and bfloat16, with the cuDNN algorithm chosen per shape.
//
// Built on first use by portable_rnn/_src/core/native.py against jaxlib's FFI headers
// (jax.ffi.include_dir()) and the cuDNN and CUDA runtime headers of the NVIDIA wheels; loaded
// with ctypes by call.py, which registers the two handlers below as the FFI targets
// "portable_rnn_cudnn_rnn_fwd" and "portable_rnn_cudnn_rnn_bwd" for the CUDA platform and calls
// the C functions at the end (the plan query, device facts) while tracing.
//
// Status: written against the headers and compiled on a machine without a GPU; it has not run
// on a GPU yet. tests/test_gpu_cudnn_ffi.py and `python -m portable_rnn selftest` are the
// checks a GPU machine runs (docs/development.md, "The cudnn_ffi route").
//
// The cuDNN v8/v9 RNN API used here, and where the calls follow others:
// - cudnnSetRNNDescriptor_v8, cudnnSetRNNDataDescriptor, cudnnGetRNNTempSpaceSizes,
//   cudnnRNNForward, cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8: as jaxlib's
//   jaxlib/gpu/rnn_kernels.cc (jax-ml/jax) calls them, generalised from its hard-coded
//   CUDNN_LSTM / CUDNN_RNN_ALGO_STANDARD / CUDNN_DATA_FLOAT / proj_size = hidden_size, and with
//   descriptors cached per configuration instead of built and destroyed on every call.
// - The data layout CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED with padded I/O, the math types
//   (tensor-op math for 16-bit data, FMA math for float32 without TF32) and float32 math
//   precision for 16-bit data, the no-dropout descriptor, and cudnnGetRNNWeightParams for the
//   weight layout: as PyTorch's aten/src/ATen/native/cudnn/RNN.cpp (_cudnn_rnn,
//   _cudnn_rnn_backward_input, _cudnn_rnn_backward_weight, get_parameters,
//   promote_rnn_math_type), which runs every cuDNN algorithm with the sequence-major layout.
// - The weight gradient: cuDNN accumulates into the buffer (CUDNN_WGRAD_MODE_ADD), so it is
//   zeroed on the stream first, as jaxlib zeroes its dw operand and PyTorch allocates at::zeros.
//
// Sequence lengths. cudnnSetRNNDataDescriptor takes the lengths as a host array; the
// devSeqLengths argument of cudnnRNNForward and the backward calls is a device copy of it
// (cuDNN 8 and 9 documentation), which is what the `seq` operand is. When every length is the
// sequence length (the attribute ragged = 0) the host array is known without looking at the
// device and nothing is copied or synchronised. With ragged = 1 the lengths are copied to the
// host and the stream is synchronised once per call (forward, and again in the backward), as
// jaxlib does on every call: cuDNN's API has no way to take them from the device alone.
// Such calls are not CUDA-graph safe, so neither handler declares command-buffer support.

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// The data type codes call.py passes; the compute dtype of a call is x's.
constexpr int64_t kFloat32 = 0;
constexpr int64_t kFloat16 = 1;
constexpr int64_t kBFloat16 = 2;

// One RNN as cuDNN sees it; call.py's `Config` and `_config` build the same tuple.
struct Config {
  int64_t mode;  // cudnnRNNMode_t: 0 RELU, 1 TANH, 2 LSTM, 3 GRU
  int64_t dtype;
  int64_t input_size;
  int64_t hidden_size;
  int64_t proj_size;  // 0: no projection
  int64_t num_layers;
  int64_t bidirectional;
  int64_t batch;
  int64_t max_seq;
  int64_t algo;  // cudnnRNNAlgo_t
  int64_t allow_tf32;
  int64_t training;  // the forward keeps a reserve space for the backward

  auto Tie() const {
    return std::tie(mode, dtype, input_size, hidden_size, proj_size, num_layers,
                    bidirectional, batch, max_seq, algo, allow_tf32, training);
  }
  bool operator<(const Config& other) const { return Tie() < other.Tie(); }
  int64_t Directions() const { return bidirectional ? 2 : 1; }
  int64_t OutSize() const { return proj_size ? proj_size : hidden_size; }
  bool Lstm() const { return mode == CUDNN_LSTM; }
};
constexpr int64_t kConfigSize = 12;

cudnnDataType_t DataType(int64_t dtype) {
  switch (dtype) {
    case kFloat16:
      return CUDNN_DATA_HALF;
    case kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

size_t ItemSize(int64_t dtype) { return dtype == kFloat32 ? 4 : 2; }

// Every helper returns an error message, empty on success.
using Status = std::string;

Status CudnnError(const char* expr, cudnnStatus_t status) {
  std::ostringstream out;
  out << expr << " failed: " << cudnnGetErrorString(status);
#if CUDNN_MAJOR >= 9
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  if (detail[0]) out << " (" << detail << ")";
#endif
  return out.str();
}

#define PRNN_CUDNN(expr)                                          \
  do {                                                            \
    cudnnStatus_t prnn_status_ = (expr);                          \
    if (prnn_status_ != CUDNN_STATUS_SUCCESS) {                   \
      return CudnnError(#expr, prnn_status_);                     \
    }                                                             \
  } while (0)

#define PRNN_CUDA(expr)                                                          \
  do {                                                                           \
    cudaError_t prnn_error_ = (expr);                                            \
    if (prnn_error_ != cudaSuccess) {                                            \
      return std::string(#expr) + " failed: " + cudaGetErrorString(prnn_error_); \
    }                                                                            \
  } while (0)

#define PRNN_OK(expr)                       \
  do {                                      \
    Status prnn_message_ = (expr);          \
    if (!prnn_message_.empty()) {           \
      return prnn_message_;                 \
    }                                       \
  } while (0)

// The descriptors of one configuration, built once and kept (per stream: see Context).
struct Rnn {
  Config config{};
  cudnnDropoutDescriptor_t dropout = nullptr;
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnRNNDataDescriptor_t x = nullptr;
  cudnnRNNDataDescriptor_t y = nullptr;
  cudnnTensorDescriptor_t h = nullptr;
  cudnnTensorDescriptor_t c = nullptr;
  size_t weight_space = 0;
  size_t workspace = 0;  // for the lengths the data descriptors hold
  size_t reserve = 0;
  bool full = true;  // the data descriptors hold max_seq for every sequence
  std::vector<int32_t> lengths;

  Rnn() = default;
  Rnn(const Rnn&) = delete;
  Rnn& operator=(const Rnn&) = delete;
  ~Rnn() {
    if (c) cudnnDestroyTensorDescriptor(c);
    if (h) cudnnDestroyTensorDescriptor(h);
    if (y) cudnnDestroyRNNDataDescriptor(y);
    if (x) cudnnDestroyRNNDataDescriptor(x);
    if (rnn) cudnnDestroyRNNDescriptor(rnn);
    if (dropout) cudnnDestroyDropoutDescriptor(dropout);
  }
};

// Sets the x and y data descriptors for `lengths` (host memory, one per sequence) and sizes the
// workspace and reserve space cuDNN asks for with them.
Status SetLengths(cudnnHandle_t handle, Rnn& r, const int32_t* lengths) {
  const Config& c = r.config;
  r.lengths.assign(lengths, lengths + c.batch);
  // The padding symbol is read in the data's own type: zero bytes are 0 in each of them.
  double fill = 0.0;
  cudnnDataType_t dtype = DataType(c.dtype);
  PRNN_CUDNN(cudnnSetRNNDataDescriptor(r.x, dtype, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                                       static_cast<int>(c.max_seq), static_cast<int>(c.batch),
                                       static_cast<int>(c.input_size), r.lengths.data(),
                                       &fill));
  PRNN_CUDNN(cudnnSetRNNDataDescriptor(
      r.y, dtype, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, static_cast<int>(c.max_seq),
      static_cast<int>(c.batch), static_cast<int>(c.OutSize() * c.Directions()),
      r.lengths.data(), &fill));
  PRNN_CUDNN(cudnnGetRNNTempSpaceSizes(
      handle, r.rnn, c.training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE, r.x,
      &r.workspace, c.training ? &r.reserve : nullptr));
  return "";
}

Status SetTensor(cudnnTensorDescriptor_t desc, cudnnDataType_t dtype, int64_t d0, int64_t d1,
                 int64_t d2) {
  int dims[3] = {static_cast<int>(d0), static_cast<int>(d1), static_cast<int>(d2)};
  int strides[3] = {dims[1] * dims[2], dims[2], 1};
  PRNN_CUDNN(cudnnSetTensorNdDescriptor(desc, dtype, 3, dims, strides));
  return "";
}

Status Make(cudnnHandle_t handle, const Config& c, std::unique_ptr<Rnn>* out) {
  auto r = std::make_unique<Rnn>();
  r->config = c;
  cudnnDataType_t dtype = DataType(c.dtype);
  // No dropout inside cuDNN: portable_rnn applies its own masks between layers (one call per
  // layer). Dropout 0 needs no RNG state (PyTorch's DropoutDescriptor::set_no_dropout).
  PRNN_CUDNN(cudnnCreateDropoutDescriptor(&r->dropout));
  PRNN_CUDNN(cudnnSetDropoutDescriptor(r->dropout, handle, 0.0f, nullptr, 0, 0));
  cudnnMathType_t math = c.dtype != kFloat32 ? CUDNN_TENSOR_OP_MATH
                         : c.allow_tf32     ? CUDNN_DEFAULT_MATH
                                            : CUDNN_FMA_MATH;
  PRNN_CUDNN(cudnnCreateRNNDescriptor(&r->rnn));
  PRNN_CUDNN(cudnnSetRNNDescriptor_v8(
      r->rnn, static_cast<cudnnRNNAlgo_t>(c.algo), static_cast<cudnnRNNMode_t>(c.mode),
      CUDNN_RNN_DOUBLE_BIAS, c.bidirectional ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL,
      CUDNN_LINEAR_INPUT, dtype, CUDNN_DATA_FLOAT, math, static_cast<int32_t>(c.input_size),
      static_cast<int32_t>(c.hidden_size), static_cast<int32_t>(c.OutSize()),
      static_cast<int32_t>(c.num_layers), r->dropout, CUDNN_RNN_PADDED_IO_ENABLED));
  PRNN_CUDNN(cudnnCreateRNNDataDescriptor(&r->x));
  PRNN_CUDNN(cudnnCreateRNNDataDescriptor(&r->y));
  PRNN_CUDNN(cudnnCreateTensorDescriptor(&r->h));
  PRNN_OK(SetTensor(r->h, dtype, c.num_layers * c.Directions(), c.batch, c.OutSize()));
  if (c.Lstm()) {
    PRNN_CUDNN(cudnnCreateTensorDescriptor(&r->c));
    PRNN_OK(SetTensor(r->c, dtype, c.num_layers * c.Directions(), c.batch, c.hidden_size));
  }
  PRNN_CUDNN(cudnnGetRNNWeightSpaceSize(handle, r->rnn, &r->weight_space));
  std::vector<int32_t> full(c.batch, static_cast<int32_t>(c.max_seq));
  PRNN_OK(SetLengths(handle, *r, full.data()));
  r->full = true;
  *out = std::move(r);
  return "";
}

// A cuDNN handle on one stream, with the descriptors built for it. Kept for the process's life,
// as jaxlib's handle pool keeps its handles.
struct Context {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
  std::map<Config, std::unique_ptr<Rnn>> rnns;
};

std::mutex contexts_mu;
std::map<std::pair<int32_t, cudaStream_t>, std::unique_ptr<Context>>* contexts =
    new std::map<std::pair<int32_t, cudaStream_t>, std::unique_ptr<Context>>();

// Creates a handle on `device` (made current for the call, then restored).
Status CreateHandle(int32_t device, cudnnHandle_t* handle) {
  int previous = -1;
  PRNN_CUDA(cudaGetDevice(&previous));
  if (device >= 0 && previous != device) PRNN_CUDA(cudaSetDevice(device));
  cudnnStatus_t status = cudnnCreate(handle);
  if (device >= 0 && previous != device) PRNN_CUDA(cudaSetDevice(previous));
  if (status != CUDNN_STATUS_SUCCESS) return CudnnError("cudnnCreate(&handle)", status);
  return "";
}

Status GetContext(int32_t device, cudaStream_t stream, Context** out) {
  std::lock_guard<std::mutex> lock(contexts_mu);
  auto& slot = (*contexts)[{device, stream}];
  if (!slot) {
    auto context = std::make_unique<Context>();
    PRNN_OK(CreateHandle(device, &context->handle));
    PRNN_CUDNN(cudnnSetStream(context->handle, stream));
    slot = std::move(context);
  }
  *out = slot.get();
  return "";
}

Status GetRnn(Context& context, const Config& config, Rnn** out) {
  auto& slot = context.rnns[config];
  if (!slot) PRNN_OK(Make(context.handle, config, &slot));
  *out = slot.get();
  return "";
}

// Points the data descriptors at this call's lengths: the device copy `dev_lengths` read back
// when the call is ragged (one copy and one stream synchronisation), else every length max_seq
// without touching the device.
Status UseLengths(cudnnHandle_t handle, cudaStream_t stream, Rnn& r, bool ragged,
                  const int32_t* dev_lengths) {
  const Config& c = r.config;
  if (!ragged) {
    if (!r.full) {
      std::vector<int32_t> full(c.batch, static_cast<int32_t>(c.max_seq));
      PRNN_OK(SetLengths(handle, r, full.data()));
      r.full = true;
    }
    return "";
  }
  std::vector<int32_t> host(c.batch, 0);
  PRNN_CUDA(cudaMemcpyAsync(host.data(), dev_lengths, host.size() * sizeof(int32_t),
                            cudaMemcpyDeviceToHost, stream));
  PRNN_CUDA(cudaStreamSynchronize(stream));
  for (int64_t b = 0; b < c.batch; ++b) {
    if (host[b] < 1 || host[b] > c.max_seq) {
      std::ostringstream out;
      out << "sequence length " << host[b] << " at batch index " << b << " is outside [1, "
          << c.max_seq << "] (portable_rnn never passes a length 0 to cuDNN)";
      return out.str();
    }
  }
  PRNN_OK(SetLengths(handle, r, host.data()));
  r.full = false;
  return "";
}

Status Workspace(ffi::ScratchAllocator& scratch, size_t size, void** out) {
  *out = nullptr;
  if (!size) return "";
  std::optional<void*> p = scratch.Allocate(size, 256);
  if (!p.has_value()) {
    return "the workspace of " + std::to_string(size) + " bytes could not be allocated";
  }
  *out = *p;
  return "";
}

int64_t DtypeCode(ffi::DataType dtype) {
  switch (dtype) {
    case ffi::DataType::F32:
      return kFloat32;
    case ffi::DataType::F16:
      return kFloat16;
    case ffi::DataType::BF16:
      return kBFloat16;
    default:
      return -1;
  }
}

Status CheckBytes(const char* name, size_t got, size_t want) {
  if (got == want) return "";
  std::ostringstream out;
  out << "`" << name << "` has " << got << " bytes; cuDNN expects " << want;
  return out.str();
}

Status ConfigOf(const ffi::AnyBuffer& x, int64_t mode, int64_t input_size, int64_t hidden_size,
                int64_t proj_size, int64_t num_layers, int64_t bidirectional, int64_t algo,
                int64_t allow_tf32, int64_t training, Config* config) {
  auto dims = x.dimensions();
  if (dims.size() != 3 || dims[2] != input_size) {
    return "x must be (T, B, input_size) with input_size=" + std::to_string(input_size);
  }
  int64_t dtype = DtypeCode(x.element_type());
  if (dtype < 0) return "x must be float32, float16 or bfloat16";
  *config = Config{mode, dtype,  input_size, hidden_size, proj_size, num_layers, bidirectional,
                   dims[1], dims[0], algo,  allow_tf32, training};
  return "";
}

// What a forward and a backward call share: the configuration read off `x` and the
// attributes, the device's context (locked until the call returns), its cached descriptors with
// this call's lengths, the weights and reserve space checked against cuDNN's sizes (the reserve
// only when training), and the workspace from XLA's scratch allocator.
struct Prepared {
  Config config{};
  Context* context = nullptr;
  std::unique_lock<std::mutex> lock;
  Rnn* r = nullptr;
  const int32_t* lengths = nullptr;
  void* workspace = nullptr;
};

Status Prepare(cudaStream_t stream, ffi::ScratchAllocator& scratch, int32_t device,
               const ffi::AnyBuffer& x, const ffi::AnyBuffer& w, const ffi::AnyBuffer& seq,
               size_t reserve_bytes, int64_t mode, int64_t input_size, int64_t hidden_size,
               int64_t proj_size, int64_t num_layers, int64_t bidirectional, int64_t algo,
               int64_t allow_tf32, int64_t training, int64_t ragged, Prepared* call) {
  PRNN_OK(ConfigOf(x, mode, input_size, hidden_size, proj_size, num_layers, bidirectional, algo,
                   allow_tf32, training, &call->config));
  PRNN_OK(GetContext(device, stream, &call->context));
  call->lock = std::unique_lock<std::mutex>(call->context->mu);
  PRNN_OK(GetRnn(*call->context, call->config, &call->r));
  call->lengths = static_cast<const int32_t*>(seq.untyped_data());
  PRNN_OK(UseLengths(call->context->handle, stream, *call->r, ragged != 0, call->lengths));
  PRNN_OK(CheckBytes("weights", w.size_bytes(), call->r->weight_space));
  if (training && reserve_bytes < call->r->reserve) {
    return CheckBytes("reserve space", reserve_bytes, call->r->reserve);
  }
  return Workspace(scratch, call->r->workspace, &call->workspace);
}

Status ForwardImpl(cudaStream_t stream, ffi::ScratchAllocator& scratch, int32_t device,
                   const ffi::AnyBuffer& x, const ffi::AnyBuffer& hx, const ffi::AnyBuffer& cx,
                   const ffi::AnyBuffer& w, const ffi::AnyBuffer& seq, ffi::AnyBuffer y,
                   ffi::AnyBuffer hy, ffi::AnyBuffer cy, ffi::AnyBuffer reserve, int64_t mode,
                   int64_t input_size, int64_t hidden_size, int64_t proj_size,
                   int64_t num_layers, int64_t bidirectional, int64_t algo, int64_t allow_tf32,
                   int64_t training, int64_t ragged) {
  Prepared call;
  PRNN_OK(Prepare(stream, scratch, device, x, w, seq, reserve.size_bytes(), mode, input_size,
                  hidden_size, proj_size, num_layers, bidirectional, algo, allow_tf32, training,
                  ragged, &call));
  Context* context = call.context;
  Rnn* r = call.r;
  const int32_t* dev_lengths = call.lengths;
  void* workspace = call.workspace;
  bool lstm = call.config.Lstm();
  PRNN_CUDNN(cudnnRNNForward(
      context->handle, r->rnn, training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
      dev_lengths, r->x, x.untyped_data(), r->y, y.untyped_data(), r->h, hx.untyped_data(),
      hy.untyped_data(), lstm ? r->c : nullptr, lstm ? cx.untyped_data() : nullptr,
      lstm ? cy.untyped_data() : nullptr, r->weight_space, w.untyped_data(), r->workspace,
      workspace, training ? r->reserve : 0, training ? reserve.untyped_data() : nullptr));
  return "";
}

Status BackwardImpl(cudaStream_t stream, ffi::ScratchAllocator& scratch, int32_t device,
                    const ffi::AnyBuffer& dy, const ffi::AnyBuffer& dhy,
                    const ffi::AnyBuffer& dcy, const ffi::AnyBuffer& x,
                    const ffi::AnyBuffer& hx, const ffi::AnyBuffer& cx,
                    const ffi::AnyBuffer& w, const ffi::AnyBuffer& y,
                    const ffi::AnyBuffer& seq, ffi::AnyBuffer dx, ffi::AnyBuffer dhx,
                    ffi::AnyBuffer dcx, ffi::AnyBuffer dw, ffi::AnyBuffer reserve,
                    int64_t mode, int64_t input_size, int64_t hidden_size, int64_t proj_size,
                    int64_t num_layers, int64_t bidirectional, int64_t algo,
                    int64_t allow_tf32, int64_t ragged) {
  Prepared call;
  PRNN_OK(Prepare(stream, scratch, device, x, w, seq, reserve.size_bytes(), mode, input_size,
                  hidden_size, proj_size, num_layers, bidirectional, algo, allow_tf32,
                  /*training=*/1, ragged, &call));
  Context* context = call.context;
  Rnn* r = call.r;
  const int32_t* dev_lengths = call.lengths;
  void* workspace = call.workspace;
  PRNN_OK(CheckBytes("dw", dw.size_bytes(), r->weight_space));
  bool lstm = call.config.Lstm();
  // The reserve space is read and written by both calls (cuDNN: "input/output"); the buffer
  // is the operand XLA aliases to this call's last result, never the forward's own output.
  PRNN_CUDNN(cudnnRNNBackwardData_v8(
      context->handle, r->rnn, dev_lengths, r->y, y.untyped_data(), dy.untyped_data(), r->x,
      dx.untyped_data(), r->h, hx.untyped_data(), dhy.untyped_data(), dhx.untyped_data(),
      lstm ? r->c : nullptr, lstm ? cx.untyped_data() : nullptr,
      lstm ? dcy.untyped_data() : nullptr, lstm ? dcx.untyped_data() : nullptr,
      r->weight_space, w.untyped_data(), r->workspace, workspace, r->reserve,
      reserve.untyped_data()));
  PRNN_CUDA(cudaMemsetAsync(dw.untyped_data(), 0, dw.size_bytes(), stream));
  PRNN_CUDNN(cudnnRNNBackwardWeights_v8(
      context->handle, r->rnn, CUDNN_WGRAD_MODE_ADD, dev_lengths, r->x, x.untyped_data(), r->h,
      hx.untyped_data(), r->y, y.untyped_data(), r->weight_space, dw.untyped_data(),
      r->workspace, workspace, r->reserve, reserve.untyped_data()));
  return "";
}

ffi::Error AsError(const Status& message, const char* what) {
  if (message.empty()) return ffi::Error::Success();
  return ffi::Error::Internal(std::string("portable_rnn cuDNN RNN ") + what + ": " + message);
}

ffi::Error Forward(cudaStream_t stream, ffi::ScratchAllocator scratch, int32_t device,
                   ffi::AnyBuffer x, ffi::AnyBuffer hx, ffi::AnyBuffer cx, ffi::AnyBuffer w,
                   ffi::AnyBuffer seq, ffi::Result<ffi::AnyBuffer> y,
                   ffi::Result<ffi::AnyBuffer> hy, ffi::Result<ffi::AnyBuffer> cy,
                   ffi::Result<ffi::AnyBuffer> reserve, int64_t mode, int64_t input_size,
                   int64_t hidden_size, int64_t proj_size, int64_t num_layers,
                   int64_t bidirectional, int64_t algo, int64_t allow_tf32, int64_t training,
                   int64_t ragged) {
  return AsError(ForwardImpl(stream, scratch, device, x, hx, cx, w, seq, *y, *hy, *cy,
                             *reserve, mode, input_size, hidden_size, proj_size, num_layers,
                             bidirectional, algo, allow_tf32, training, ragged),
                 "forward");
}

ffi::Error Backward(cudaStream_t stream, ffi::ScratchAllocator scratch, int32_t device,
                    ffi::AnyBuffer dy, ffi::AnyBuffer dhy, ffi::AnyBuffer dcy, ffi::AnyBuffer x,
                    ffi::AnyBuffer hx, ffi::AnyBuffer cx, ffi::AnyBuffer w, ffi::AnyBuffer y,
                    ffi::AnyBuffer reserve_in, ffi::AnyBuffer seq,
                    ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dhx,
                    ffi::Result<ffi::AnyBuffer> dcx, ffi::Result<ffi::AnyBuffer> dw,
                    ffi::Result<ffi::AnyBuffer> reserve, int64_t mode, int64_t input_size,
                    int64_t hidden_size, int64_t proj_size, int64_t num_layers,
                    int64_t bidirectional, int64_t algo, int64_t allow_tf32, int64_t ragged) {
  (void)reserve_in;  // aliased to `reserve`, the buffer cuDNN may write
  return AsError(BackwardImpl(stream, scratch, device, dy, dhy, dcy, x, hx, cx, w, y, seq, *dx,
                              *dhx, *dcx, *dw, *reserve, mode, input_size, hidden_size,
                              proj_size, num_layers, bidirectional, algo, allow_tf32, ragged),
                 "backward");
}

// The handle the trace-time queries use (the current device's), created once.
std::mutex query_mu;
cudnnHandle_t query_handle = nullptr;

Status QueryHandle(cudnnHandle_t* out) {
  if (!query_handle) PRNN_OK(CreateHandle(-1, &query_handle));
  *out = query_handle;
  return "";
}

Status Plan(const int64_t* values, int64_t n_values, int64_t* out, int64_t n_out) {
  if (n_values != kConfigSize) return "the plan query takes 12 values";
  Config c{values[0], values[1], values[2], values[3], values[4],  values[5],
           values[6], values[7], values[8], values[9], values[10], values[11]};
  cudnnHandle_t handle = nullptr;
  PRNN_OK(QueryHandle(&handle));
  std::unique_ptr<Rnn> r;
  PRNN_OK(Make(handle, c, &r));
  int64_t linear = c.mode == CUDNN_LSTM ? 8 : c.mode == CUDNN_GRU ? 6 : 2;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < linear; ++i) ids.push_back(i);
  if (c.proj_size) ids.push_back(linear);  // the LSTM's projection: linear layer 8
  int64_t pseudo = c.num_layers * c.Directions();
  int64_t needed = 4 + pseudo * static_cast<int64_t>(ids.size()) * 6;
  if (n_out < needed) return "the plan query needs " + std::to_string(needed) + " outputs";
  out[0] = static_cast<int64_t>(r->workspace);
  out[1] = static_cast<int64_t>(r->reserve);
  out[2] = static_cast<int64_t>(r->weight_space);
  out[3] = pseudo * static_cast<int64_t>(ids.size());
  // Where each matrix and bias lives in cuDNN's weight space (PyTorch's get_parameters asks
  // cudnnGetRNNWeightParams the same way, on a real buffer).
  void* space = nullptr;
  PRNN_CUDA(cudaMalloc(&space, r->weight_space));
  cudnnTensorDescriptor_t m_desc = nullptr, b_desc = nullptr;
  Status status;
  if (cudnnCreateTensorDescriptor(&m_desc) != CUDNN_STATUS_SUCCESS ||
      cudnnCreateTensorDescriptor(&b_desc) != CUDNN_STATUS_SUCCESS) {
    status = "cudnnCreateTensorDescriptor failed";
  }
  int64_t* row = out + 4;
  size_t item = ItemSize(c.dtype);
  for (int64_t p = 0; p < pseudo && status.empty(); ++p) {
    for (int64_t id : ids) {
      void* m_addr = nullptr;
      void* b_addr = nullptr;
      cudnnStatus_t s = cudnnGetRNNWeightParams(
          handle, r->rnn, static_cast<int32_t>(p), r->weight_space, space,
          static_cast<int32_t>(id), m_desc, &m_addr, b_desc, &b_addr);
      if (s != CUDNN_STATUS_SUCCESS) {
        status = CudnnError("cudnnGetRNNWeightParams", s);
        break;
      }
      int64_t sizes[2] = {0, 0};
      cudnnTensorDescriptor_t descs[2] = {m_desc, b_desc};
      void* addrs[2] = {m_addr, b_addr};
      for (int k = 0; k < 2; ++k) {
        if (!addrs[k]) continue;
        cudnnDataType_t dtype;
        int rank = 0, dims[8] = {0}, strides[8] = {0};
        s = cudnnGetTensorNdDescriptor(descs[k], 8, &dtype, &rank, dims, strides);
        if (s != CUDNN_STATUS_SUCCESS) {
          status = CudnnError("cudnnGetTensorNdDescriptor", s);
          break;
        }
        sizes[k] = 1;
        for (int d = 0; d < rank; ++d) sizes[k] *= dims[d];
      }
      row[0] = p;
      row[1] = id;
      row[2] = m_addr ? (static_cast<char*>(m_addr) - static_cast<char*>(space)) /
                            static_cast<int64_t>(item)
                      : -1;
      row[3] = m_addr ? sizes[0] : 0;
      row[4] = b_addr ? (static_cast<char*>(b_addr) - static_cast<char*>(space)) /
                            static_cast<int64_t>(item)
                      : -1;
      row[5] = b_addr ? sizes[1] : 0;
      row += 6;
    }
  }
  if (b_desc) cudnnDestroyTensorDescriptor(b_desc);
  if (m_desc) cudnnDestroyTensorDescriptor(m_desc);
  cudaFree(space);
  return status;
}

int Report(const Status& status, char* error, int64_t n_error) {
  if (status.empty()) return 0;
  if (error && n_error > 0) {
    std::strncpy(error, status.c_str(), static_cast<size_t>(n_error - 1));
    error[n_error - 1] = '\0';
  }
  return 1;
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PortableRnnCudnnRnnForward, Forward,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()  // x (T, B, I)
                                  .Arg<ffi::AnyBuffer>()  // h_0 (L*D, B, P or H)
                                  .Arg<ffi::AnyBuffer>()  // c_0 (L*D, B, H); empty but LSTM
                                  .Arg<ffi::AnyBuffer>()  // weights, cuDNN's layout
                                  .Arg<ffi::AnyBuffer>()  // seq_lengths (B,) int32, >= 1
                                  .Ret<ffi::AnyBuffer>()  // y (T, B, D*(P or H))
                                  .Ret<ffi::AnyBuffer>()  // h_n
                                  .Ret<ffi::AnyBuffer>()  // c_n
                                  .Ret<ffi::AnyBuffer>()  // reserve space (uint8)
                                  .Attr<int64_t>("mode")
                                  .Attr<int64_t>("input_size")
                                  .Attr<int64_t>("hidden_size")
                                  .Attr<int64_t>("proj_size")
                                  .Attr<int64_t>("num_layers")
                                  .Attr<int64_t>("bidirectional")
                                  .Attr<int64_t>("algo")
                                  .Attr<int64_t>("allow_tf32")
                                  .Attr<int64_t>("training")
                                  .Attr<int64_t>("ragged"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(PortableRnnCudnnRnnBackward, Backward,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::AnyBuffer>()  // dy
                                  .Arg<ffi::AnyBuffer>()  // dh_n
                                  .Arg<ffi::AnyBuffer>()  // dc_n
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // h_0
                                  .Arg<ffi::AnyBuffer>()  // c_0
                                  .Arg<ffi::AnyBuffer>()  // weights
                                  .Arg<ffi::AnyBuffer>()  // y
                                  .Arg<ffi::AnyBuffer>()  // reserve space (aliased below)
                                  .Arg<ffi::AnyBuffer>()  // seq_lengths
                                  .Ret<ffi::AnyBuffer>()  // dx
                                  .Ret<ffi::AnyBuffer>()  // dh_0
                                  .Ret<ffi::AnyBuffer>()  // dc_0
                                  .Ret<ffi::AnyBuffer>()  // dw, cuDNN's layout
                                  .Ret<ffi::AnyBuffer>()  // reserve space
                                  .Attr<int64_t>("mode")
                                  .Attr<int64_t>("input_size")
                                  .Attr<int64_t>("hidden_size")
                                  .Attr<int64_t>("proj_size")
                                  .Attr<int64_t>("num_layers")
                                  .Attr<int64_t>("bidirectional")
                                  .Attr<int64_t>("algo")
                                  .Attr<int64_t>("allow_tf32")
                                  .Attr<int64_t>("ragged"));

// The trace-time plan of one configuration (call.py's `plan`): out[0..3] = workspace bytes,
// reserve-space bytes, weight-space bytes, rows; then per pseudo-layer and linear layer a row
// (pseudo-layer, linear layer id, matrix offset, matrix size, bias offset, bias size), offsets
// and sizes in elements, -1 for an absent matrix or bias. Returns 0, or 1 with the error text.
extern "C" int PortableRnnCudnnRnnPlan(const int64_t* config, int64_t n_config, int64_t* out,
                                       int64_t n_out, char* error, int64_t n_error) {
  std::lock_guard<std::mutex> lock(query_mu);
  return Report(Plan(config, n_config, out, n_out), error, n_error);
}

// The current device: out = (major, minor, multiprocessor count). Returns 0, or 1 with the
// error text.
extern "C" int PortableRnnCudnnRnnDevice(int64_t* out, char* error, int64_t n_error) {
  auto query = [&]() -> Status {
    int device = 0, major = 0, minor = 0, sms = 0;
    PRNN_CUDA(cudaGetDevice(&device));
    PRNN_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    PRNN_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    PRNN_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    out[0] = major;
    out[1] = minor;
    out[2] = sms;
    return "";
  };
  return Report(query(), error, n_error);
}

// Versions, without a GPU: out = (CUDNN_VERSION built against, cudnnGetVersion() loaded,
// CUDART_VERSION built against).
extern "C" void PortableRnnCudnnRnnVersions(int64_t* out) {
  out[0] = CUDNN_VERSION;
  out[1] = static_cast<int64_t>(cudnnGetVersion());
  out[2] = CUDART_VERSION;
}
