// Where a tensor's memory lives, as values: the host (cpu) or one CUDA device (cuda:N), and which
// kind of memory there. Nothing here asks a runtime; whether a device is usable now is
// core/tensor/device.h's question.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace ember {

enum class DeviceType : std::uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // always 0 for the CPU

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::cpu ? 0 : i) {}

  static constexpr Device cpu() { return Device(DeviceType::cpu); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::cuda, index); }

  // Parses "cpu", "cuda" (device 0) and "cuda:N"; throws ValueError naming the text otherwise.
  static Device parse(std::string_view text);

  // The device to compute on: EMBER_DEVICE when set (parsed as above, and it must be usable),
  // else cuda:0 when a usable CUDA device exists, else the CPU. best() and best_reason() ask the
  // CUDA runtime, so they are defined above this floor (core/tensor/device.cpp).
  static Device best();

  // Why best() chose what it chose, e.g. "cpu (no CUDA device: CUDA driver not found)".
  static std::string best_reason();

  constexpr bool is_cpu() const { return type == DeviceType::cpu; }
  constexpr bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;  // "cpu", "cuda:0"

  friend constexpr bool operator==(const Device& a, const Device& b) { return a.type == b.type && a.index == b.index; }
};

std::ostream& operator<<(std::ostream& out, const Device& device);

// Pageable host memory, pinned (page-locked) host memory, or a CUDA device's memory.
enum class MemoryKind : std::uint8_t { pageable, pinned, device };
const char* memory_kind_name(MemoryKind kind);

}  // namespace ember
