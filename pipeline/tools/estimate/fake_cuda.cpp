// A fake CUDA device for a CPU-only build of torch, so that FakeTensorMode can hold tensors on
// "cuda" and run autograd over them without a GPU. Loaded (pipeline/estimate/fake_cuda.py) before
// torch is imported, it registers what a CPU build lacks: a device guard whose devices, streams and
// events do nothing, and CUDA hooks that report one device without a primary context (so autograd
// keeps CUDA as its accelerator and stashes no streams). Nothing here touches memory or data:
// fake tensors never reach a kernel. A build of torch with CUDA has both already and needs none.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace {
using c10::Device;
using c10::DeviceIndex;
using c10::DeviceType;
using c10::Stream;

const Device kDevice(DeviceType::CUDA, 0);

struct FakeCudaGuard final : c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return DeviceType::CUDA; }
  Device exchangeDevice(Device) const override { return kDevice; }
  Device getDevice() const override { return kDevice; }
  void setDevice(Device) const override {}
  void uncheckedSetDevice(Device) const noexcept override {}
  Stream getStream(Device) const noexcept override { return Stream(Stream::DEFAULT, kDevice); }
  Stream getDefaultStream(Device) const override { return Stream(Stream::DEFAULT, kDevice); }
  Stream getStreamFromGlobalPool(Device, bool) const override { return Stream(Stream::DEFAULT, kDevice); }
  Stream getNewStream(Device, int) const override { return Stream(Stream::DEFAULT, kDevice); }
  Stream exchangeStream(Stream) const noexcept override { return Stream(Stream::DEFAULT, kDevice); }
  DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const Stream&, const DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const DeviceIndex) const noexcept override {}
  bool queryStream(const Stream&) const override { return true; }
  void synchronizeStream(const Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const DeviceIndex) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const Stream&) const override {}
};

const FakeCudaGuard guard;

struct RegisterGuard {
  RegisterGuard() {
    auto& slot = c10::impl::device_guard_impl_registry[static_cast<size_t>(DeviceType::CUDA)];
    if (slot.load() == nullptr) {
      slot.store(&guard);
    }
  }
} register_guard;
}  // namespace

namespace at {
// Registered under the name torch looks up; read once, when torch is imported.
struct FakeCUDAHooks final : CUDAHooksInterface {
  explicit FakeCUDAHooks(CUDAHooksArgs) {}
  bool hasCUDA() const override { return true; }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(DeviceIndex) const override { return false; }
  DeviceIndex deviceCount() const override { return 1; }
  int getNumGPUs() const override { return 1; }
  DeviceIndex current_device() const override { return 0; }
  DeviceIndex getCurrentDevice() const override { return 0; }
  // Fake tensors ignore a generator's values; a CPU one lets torch.Generator(device="cuda") exist.
  Generator getNewGenerator(DeviceIndex) const override { return make_generator<CPUGeneratorImpl>(); }
};
C10_REGISTER_CLASS(CUDAHooksRegistry, CUDAHooks, FakeCUDAHooks)
}  // namespace at
