// The render step as the service sees it: one small interface, so the HTTP
// layer and its tests do not depend on how an inscription is drawn.
// CreateInscriptionRenderer() (render_adapter.cc) is the one place that binds it
// to danqing::render::Renderer.
//
// Thread-safety: Render() and CanRender() may be called from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "image/image.h"

namespace danqing::service {

struct InscriptionJob {
  std::string text;  // the verse: lines separated by '\n'
  std::string title;
  std::string signature;  // the poet, or the visitor's name
  std::string date;
  int width = 1024;
  int height = 768;
  std::string style = "xing";            // kai, xing, cao
  std::string background = "landscape";  // landscape, paper, photo
  bool vertical = true;
  uint64_t seed = 0;
  const image::Image* photo = nullptr;  // the visitor's photo (always set by the service)
  // Issue 28: when set, the render also records the writing into it.
  std::shared_ptr<struct WritingPlanes> writing;
};

// The writing (issue 28; render::Writing): when the brush first reached each
// pixel, at half resolution (plane_width x plane_height, ms, 0xFFFF never),
// and the page before the writing.
struct WritingPlanes {
  int plane_width = 0, plane_height = 0;
  std::vector<uint16_t> ms;
  image::Image background;
  uint32_t seal_ms = 0, end_ms = 0;
};

// Which backend drew one inscription, and why not the GPU when it was meant to.
struct RenderOutcome {
  std::string backend;    // "cpu", "cuda"
  std::string gpu_error;  // non-empty: the GPU could not take or finish it, the CPU did
};

class InscriptionRenderer {
 public:
  virtual ~InscriptionRenderer() = default;
  // INVALID_ARGUMENT for a bad size, style or background. `outcome` may be null.
  virtual Result<image::Image> Render(const InscriptionJob& job, RenderOutcome* outcome) const = 0;
  // Whether a character can be written (strokes or a fallback font).
  virtual bool CanRender(char32_t c) const = 0;
  // "cpu" or "cuda".
  virtual std::string Backend() const = 0;
  // Empty, or why the GPU can no longer be used by this process (a lost CUDA
  // context): the service's liveness probe then fails so the pod restarts.
  virtual std::string GpuLost() const { return ""; }
  // The GPU the CUDA backend renders on: its name (empty: none) and compute
  // capability (0.0: unknown), for what else it offers (NVENC, issue 28).
  struct Gpu {
    std::string name;
    int major = 0, minor = 0;
  };
  virtual Gpu RenderGpu() const { return {}; }
};

struct RendererSettings {
  std::string strokes_path;  // empty: the renderer's default lookup
  std::string font_path;     // empty: the renderer's default
  int threads_per_render = 1;
  std::string backend;       // auto, cpu, gpu; empty: $DANQING_RENDER_BACKEND, else auto
};

Result<std::unique_ptr<InscriptionRenderer>> CreateInscriptionRenderer(
    const RendererSettings& settings);

}  // namespace danqing::service
