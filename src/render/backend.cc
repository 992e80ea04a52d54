#include "render/backend.h"

#include <algorithm>

#include "render/passes.h"

namespace danqing::render {

std::optional<BackendChoice> ParseBackendChoice(std::string_view name) {
  if (name == "auto") return BackendChoice::kAuto;
  if (name == "cpu") return BackendChoice::kCpu;
  if (name == "gpu" || name == "cuda") return BackendChoice::kGpu;
  return std::nullopt;
}

BackendDecision DecideBackend(BackendChoice choice, const char* visible, const CudaProbe& probe) {
  BackendDecision d;
  if (choice == BackendChoice::kCpu) {
    d.reason = "cpu forced (backend cpu)";
    return d;
  }
  std::string why_not;
  const std::string vis = visible != nullptr ? visible : "";
  // "void"/"none" only says that the NVIDIA runtime injected no GPU. A CDI
  // runtime injects the allocated GPU's nodes and sets void itself (NVIDIA's
  // specs do, so that the NVIDIA hook adds nothing twice): the CUDA probe,
  // not the variable, says whether this container has a GPU.
  const bool hidden = visible != nullptr && (vis == "void" || vis == "none");
  const std::string note = hidden ? " (NVIDIA_VISIBLE_DEVICES=" + vis + ")" : std::string();
  if (!probe.compiled) {
    why_not = "built without CUDA (DANQING_CUDA=OFF)";
  } else if (probe.devices <= 0) {
    why_not = "no CUDA device: " + (probe.error.empty() ? std::string("device count 0") : probe.error) + note;
  }
  if (why_not.empty()) {
    d.gpu = true;
    d.reason = "gpu: " + std::to_string(probe.devices) + " CUDA device(s), using device 0" +
               (probe.name.empty() ? std::string() : " (" + probe.name + ")") +
               (hidden ? "; NVIDIA_VISIBLE_DEVICES=" + vis + ", yet CUDA sees it (as when CDI injects it)" : std::string());
    return d;
  }
  if (choice == BackendChoice::kGpu) {
    d.status = FailedPrecondition("render backend gpu requested but unavailable: " + why_not);
    d.reason = "gpu forced but unavailable: " + why_not;
    return d;
  }
  d.reason = "cpu: " + why_not;
  return d;
}

size_t ResampleTapsBytes(int src_w, int src_h, int dst_w, int dst_h) {
  // Per axis, three ints per output pixel (first, count, offset) and at most
  // src + 2 * dst weights: bilinear reads two per output, area averaging
  // src + dst - 1 (neighbours share at most one source pixel).
  auto axis = [](int src, int dst) {
    return static_cast<size_t>(std::max(dst, 0)) * 3 * sizeof(int) +
           (static_cast<size_t>(std::max(src, 0)) + 2 * static_cast<size_t>(std::max(dst, 0))) * sizeof(float);
  };
  return axis(src_w, dst_w) + axis(src_h, dst_h);
}

size_t DeviceBytesPerRender(int w, int h, size_t dabs, int photo_w, int photo_h) {
  const CanvasPlanes p = PlanesFor(w, h);
  auto px = [](int a, int b) { return static_cast<size_t>(a) * static_cast<size_t>(b); };
  size_t bytes = px(p.w, p.h) * 4 +                                // ink
                 2 * p.wet_buffer_px() * 4 +                       // wet, ping-pong; photo scratch
                 2 * px(p.lw, p.lh) * 4 +                          // wash and paper blotches
                 px(p.w, p.h) * 3 +                                // RGB out
                 dabs * sizeof(Dab) +                              // dab list
                 static_cast<size_t>(kMaxRidges) * (static_cast<size_t>(p.lw) * 4 + sizeof(Ridge));  // ridge heights
  if (photo_w > 0 && photo_h > 0) {
    bytes += px(photo_w, photo_h) * 3 + ResampleTapsBytes(photo_w, photo_h, p.lw, p.lh);
  }
  return bytes;
}

size_t DeviceBytesPerRender(const PassPlan& plan) {
  const size_t dabs = plan.dabs != nullptr ? plan.dabs->size() : 0;
  // The writing (issue 28): its capsules, the 32-bit and 16-bit write-time
  // planes and the background RGB.
  const CanvasPlanes cp = PlanesFor(plan.planes.w, plan.planes.h);
  const size_t writing =
      plan.writing == nullptr
          ? 0
          : std::max<size_t>(
                1, plan.writing->segments != nullptr ? plan.writing->segments->size() : 0) *
                    sizeof(WriteSegment) +
                static_cast<size_t>(cp.ww) * static_cast<size_t>(cp.wh) *
                    (4 + 2) +  // half resolution
                static_cast<size_t>(cp.w) * static_cast<size_t>(cp.h) * 3;
  if (plan.photo == nullptr)
    return DeviceBytesPerRender(plan.planes.w, plan.planes.h, dabs) + writing;
  return DeviceBytesPerRender(plan.planes.w, plan.planes.h, dabs, plan.photo->w, plan.photo->h) +
         writing;
}

size_t DeviceTextureBytes() {
  return (static_cast<size_t>(Textures::kFibre) * Textures::kFibre +
          static_cast<size_t>(Textures::kNoise2) * Textures::kNoise2 + Textures::kNoise1) *
             sizeof(float) +
         static_cast<size_t>(Textures::kPaper) * Textures::kPaper;
}

}  // namespace danqing::render
