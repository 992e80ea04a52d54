// Binds the service's InscriptionRenderer to danqing::render::Renderer.
//
// PLACEHOLDER until the render module is merged: draws the photo as a pale
// grey wash on paper and no calligraphy. Replace with the real renderer.
#include <algorithm>

#include "service/inscription_renderer.h"

namespace danqing::service {
namespace {

class PlaceholderRenderer final : public InscriptionRenderer {
 public:
  Result<image::Image> Render(const InscriptionJob& job) const override {
    if (job.width < 64 || job.height < 64 || job.width > 8192 || job.height > 8192) {
      return InvalidArgument("canvas size out of range");
    }
    image::Image out = image::Image::Filled(job.width, job.height, 242, 234, 214);
    if (job.photo != nullptr && !job.photo->empty()) {
      image::Image scaled = image::Resize(*job.photo, job.width, job.height);
      for (size_t i = 0; i + 2 < out.rgb.size(); i += 3) {
        const int grey = (scaled.rgb[i] * 3 + scaled.rgb[i + 1] * 6 + scaled.rgb[i + 2]) / 10;
        for (size_t k = 0; k < 3; ++k) {
          out.rgb[i + k] = static_cast<uint8_t>((out.rgb[i + k] * 3 + grey) / 4);
        }
      }
    }
    return out;
  }
  bool CanRender(char32_t c) const override { return c >= 0x4E00 && c <= 0x9FFF; }
  std::string Backend() const override { return "cpu"; }
};

}  // namespace

Result<std::unique_ptr<InscriptionRenderer>> CreateInscriptionRenderer(const RendererSettings&) {
  return std::unique_ptr<InscriptionRenderer>(std::make_unique<PlaceholderRenderer>());
}

}  // namespace danqing::service
