//===- EmbeddedTemplates.h - templates/ compiled into the fagen binary ----===//
#ifndef FAGEN_COMPILER_EMBEDDEDTEMPLATES_H
#define FAGEN_COMPILER_EMBEDDEDTEMPLATES_H

namespace fagen {

/// One file of templates/, path relative to templates/ (e.g. "sm80/fwd_kernel.cuh").
struct EmbeddedFile {
  const char *path;
  const char *data;
  unsigned size;
};

extern const EmbeddedFile kEmbeddedTemplates[];
extern const unsigned kEmbeddedTemplateCount;

} // namespace fagen

#endif // FAGEN_COMPILER_EMBEDDEDTEMPLATES_H
