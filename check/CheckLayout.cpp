//===- CheckLayout.cpp - `fagen check`: a static block layout from a cubin -===//
//
// The reference needs the table a static-layout kernel was compiled with; the bundle's manifest
// names it only by its hash. The table is the kernel's fagen_block_table symbol (Emit.cpp), so
// it is read from the cubin (an ELF file) and verified against the manifest's sparse_hash.
//
//===----------------------------------------------------------------------===//

#include "check/Check.h"

#include "compiler/plan/Plan.h"
#include "compiler/spec/Spec.h"

#include <elf.h>

#include <cstring>

namespace fagen {

namespace {

/// The bytes of symbol `name` in the ELF image `elf`, or an error naming what is missing.
llvm::Expected<llvm::StringRef> elfSymbolBytes(llvm::StringRef elf, llvm::StringRef name) {
  auto fail = [&](const char *what) {
    return llvm::createStringError(std::errc::invalid_argument, "%s", what);
  };
  Elf64_Ehdr eh;
  if (elf.size() < sizeof eh || !elf.starts_with(ELFMAG))
    return fail("the cubin is not an ELF file");
  std::memcpy(&eh, elf.data(), sizeof eh);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
      eh.e_shoff > elf.size() || eh.e_shnum > (elf.size() - eh.e_shoff) / sizeof(Elf64_Shdr))
    return fail("the cubin's section table is malformed");
  auto section = [&](size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, elf.data() + eh.e_shoff + i * sizeof sh, sizeof sh);
    return sh;
  };
  auto inFile = [&](const Elf64_Shdr &sh) {
    return sh.sh_type != SHT_NOBITS && sh.sh_offset <= elf.size() &&
           sh.sh_size <= elf.size() - sh.sh_offset;
  };
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr symtab = section(i);
    if (symtab.sh_type != SHT_SYMTAB || !inFile(symtab) || symtab.sh_link >= eh.e_shnum)
      continue;
    Elf64_Shdr strtab = section(symtab.sh_link);
    if (!inFile(strtab))
      continue;
    llvm::StringRef strings = elf.substr(strtab.sh_offset, strtab.sh_size);
    for (size_t s = 0; s < symtab.sh_size / sizeof(Elf64_Sym); ++s) {
      Elf64_Sym sym;
      std::memcpy(&sym, elf.data() + symtab.sh_offset + s * sizeof sym, sizeof sym);
      if (sym.st_name >= strings.size() ||
          strings.substr(sym.st_name).take_until([](char c) { return c == 0; }) != name)
        continue;
      if (sym.st_shndx == SHN_UNDEF || sym.st_shndx >= eh.e_shnum)
        return fail("the table symbol has no section");
      Elf64_Shdr data = section(sym.st_shndx);
      if (!inFile(data) || sym.st_value > data.sh_size ||
          sym.st_size > data.sh_size - sym.st_value)
        return fail("the table symbol lies outside its section");
      return elf.substr(data.sh_offset + sym.st_value, sym.st_size);
    }
  }
  return fail("the cubin has no symbol fagen_block_table");
}

} // namespace

llvm::Expected<std::vector<uint8_t>> staticBlockTable(const KernelRecord &k,
                                                      llvm::StringRef cubin) {
  llvm::Expected<llvm::StringRef> bytes = elfSymbolBytes(cubin, "fagen_block_table");
  if (!bytes)
    return llvm::createStringError(std::errc::invalid_argument,
                                   "kernel %s: reading its static block layout: %s",
                                   k.name.c_str(), llvm::toString(bytes.takeError()).c_str());
  const size_t expected = size_t(k.sparseRows) * size_t(k.sparseCols);
  if (bytes->size() != expected)
    return llvm::createStringError(
        std::errc::invalid_argument,
        "kernel %s: its cubin's block table has %zu bytes, the manifest says %d x %d",
        k.name.c_str(), bytes->size(), k.sparseRows, k.sparseCols);
  BlockSparseSpec layout; // the table as a "file" layout: blockTable() hashes it as the planner
  layout.block = k.sparseBlock;
  layout.layout = "file";
  for (int r = 0; r < k.sparseRows; ++r)
    layout.fileRows.emplace_back(bytes->bytes_begin() + size_t(r) * k.sparseCols,
                                 bytes->bytes_begin() + size_t(r + 1) * k.sparseCols);
  BlockTable table = blockTable(layout);
  if (table.hash != k.sparseHash)
    return llvm::createStringError(std::errc::invalid_argument,
                                   "kernel %s: its cubin's block table hashes to %s, the "
                                   "manifest's sparse_hash is %s",
                                   k.name.c_str(), table.hash.c_str(), k.sparseHash.c_str());
  return std::move(table.table);
}

} // namespace fagen
