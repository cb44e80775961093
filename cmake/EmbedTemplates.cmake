# Writes OUT: a C++ source holding every file under ROOT as a byte array, sorted by path, so
# that `fagen` carries its templates and their hash is part of every cache key.
file(GLOB_RECURSE files RELATIVE ${ROOT} ${ROOT}/*.cuh ${ROOT}/*.h)
list(SORT files)
set(body "")
set(table "")
set(i 0)
foreach(f ${files})
  file(READ ${ROOT}/${f} hex HEX)
  string(LENGTH "${hex}" hexlen)
  math(EXPR n "${hexlen} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND body "static const unsigned char kFile${i}[] = {${bytes}0x00};\n")
  string(APPEND table "  {\"${f}\", reinterpret_cast<const char *>(kFile${i}), ${n}},\n")
  math(EXPR i "${i} + 1")
endforeach()
file(WRITE ${OUT}.tmp "// Generated from templates/ by cmake/EmbedTemplates.cmake. Do not edit.\n"
  "#include \"compiler/build/EmbeddedTemplates.h\"\nnamespace fagen {\n${body}\n"
  "const EmbeddedFile kEmbeddedTemplates[] = {\n${table}};\n"
  "const unsigned kEmbeddedTemplateCount = ${i};\n}\n")
file(RENAME ${OUT}.tmp ${OUT})
