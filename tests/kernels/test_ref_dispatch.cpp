// The reference table is complete, and dispatch hands out the right tables.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "kernels/tables.h"

namespace wedge::kernels {
namespace {

// KernelTable is nothing but function pointers, so its bytes can be read as an array of
// them: a new entry added to the contract and forgotten in the reference shows up here.
template <typename Table>
int null_entries(const Table& table) {
  static_assert(sizeof(Table) % sizeof(void (*)()) == 0, "a table holds only function pointers");
  constexpr std::size_t count = sizeof(Table) / sizeof(void (*)());
  void (*entries[count])();
  std::memcpy(entries, &table, sizeof(Table));
  int nulls = 0;
  for (auto* entry : entries) nulls += entry == nullptr;
  return nulls;
}

TEST_CASE("ref tables fill every entry") {
  CHECK(null_entries(ref_table_f32()) == 0);
  CHECK(null_entries(ref_table_f64()) == 0);
  CHECK(null_entries(ref_memory_table()) == 0);
  CHECK(&ref_table_f32() == &ref_table_f32());  // one table, built once
}

TEST_CASE("dispatch: the CPU tables registered themselves, unknown kinds have nothing") {
  CHECK(kernel_table<float>(0) == &cpu_table_f32());
  CHECK(kernel_table<double>(0) == &cpu_table_f64());
  CHECK(memory_table(0) == &cpu_memory_table());
  CHECK(device_usable(0));
  CHECK(kernel_table<float>(7) == nullptr);
  CHECK(kernel_table<double>(-1) == nullptr);
  CHECK(memory_table(2) == nullptr);
  CHECK_FALSE(device_usable(2));
  CHECK_THROWS_AS(register_tables(5, &ref_table_f32(), nullptr, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(register_tables(-1, &ref_table_f32(), nullptr, nullptr), std::invalid_argument);
}

TEST_CASE("dispatch: a registered device's tables are returned, and can be replaced") {
  // Whatever the CUDA backend registered at start-up (if built) is put back afterwards.
  const auto* f32 = compiled_kernel_table(1);
  const auto* f64 = kernel_table<double>(1);
  const auto* mem = compiled_memory_table(1);
  const bool usable = device_usable(1);
  register_tables(1, &ref_table_f32(), nullptr, &ref_memory_table());
  CHECK(kernel_table<float>(1) == &ref_table_f32());
  CHECK(kernel_table<double>(1) == nullptr);  // a device may lack double kernels
  CHECK(memory_table(1) == &ref_memory_table());
  register_tables(1, &ref_table_f32(), nullptr, &ref_memory_table(), false);
  CHECK(kernel_table<float>(1) == nullptr);  // compiled in, device absent
  CHECK(memory_table(1) == nullptr);
  CHECK(compiled_kernel_table(1) == &ref_table_f32());
  register_tables(1, f32, f64, mem, usable);
  CHECK(compiled_kernel_table(1) == f32);
  CHECK(kernel_table<double>(1) == f64);
  CHECK(compiled_memory_table(1) == mem);
}

}  // namespace
}  // namespace wedge::kernels
