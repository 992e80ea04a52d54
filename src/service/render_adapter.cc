// Binds the service's InscriptionRenderer to danqing::render::Renderer (CPU or CUDA
// backend, chosen by the Renderer: render/backend.h).
#include <algorithm>

#include "render/renderer.h"
#include "service/inscription_renderer.h"

namespace danqing::service {
namespace {

class CalligraphyRenderer final : public InscriptionRenderer {
 public:
  CalligraphyRenderer(std::unique_ptr<render::Renderer> renderer, int threads)
      : renderer_(std::move(renderer)), threads_(threads) {}

  Result<image::Image> Render(const InscriptionJob& job, RenderOutcome* outcome) const override {
    const auto style = render::ParseStyle(job.style);
    if (!style) return InvalidArgument("unknown style '" + job.style + "'");
    const auto background = render::ParseBackground(job.background);
    if (!background) return InvalidArgument("unknown background '" + job.background + "'");
    render::Inscription text{job.text, job.title, job.signature, job.date};
    render::RenderOptions o;
    o.width = job.width;
    o.height = job.height;
    o.style = *style;
    o.background = *background;
    o.seed = job.seed;
    o.vertical = job.vertical;
    o.photo = job.photo;
    o.threads = threads_;
    render::RenderStats stats;
    render::Writing writing;
    auto img = renderer_->Render(text, o, &stats, job.writing != nullptr ? &writing : nullptr);
    if (outcome != nullptr) *outcome = RenderOutcome{stats.backend, stats.gpu_error};
    if (job.writing != nullptr && img.ok()) {
      WritingPlanes* w = job.writing.get();
      w->plane_width = writing.plane_width;
      w->plane_height = writing.plane_height;
      w->ms = std::move(writing.ms);
      w->background = std::move(writing.background);
      w->seal_ms = writing.seal_ms;
      w->end_ms = writing.end_ms;
    }
    return img;
  }
  bool CanRender(char32_t c) const override { return renderer_->CanRender(c); }
  std::string Backend() const override { return renderer_->backend(); }
  std::string GpuLost() const override { return renderer_->gpu_lost(); }
  Gpu RenderGpu() const override {
    return {renderer_->gpu_name(), renderer_->gpu_cc_major(), renderer_->gpu_cc_minor()};
  }

 private:
  std::unique_ptr<render::Renderer> renderer_;
  const int threads_;
};

}  // namespace

Result<std::unique_ptr<InscriptionRenderer>> CreateInscriptionRenderer(
    const RendererSettings& settings) {
  render::RendererConfig config;
  config.strokes_path = settings.strokes_path;
  config.font_path = settings.font_path;
  config.backend = settings.backend;
  auto r = render::Renderer::Create(config);
  if (!r.ok()) return r.status();
  return std::unique_ptr<InscriptionRenderer>(std::make_unique<CalligraphyRenderer>(
      std::move(r).value(), std::max(1, settings.threads_per_render)));
}

}  // namespace danqing::service
