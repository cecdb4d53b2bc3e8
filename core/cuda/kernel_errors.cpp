// Messages for errors found inside kernels.
#include "core/cuda/kernel_errors.h"

#include "base/error.h"
#include "kernels/common.h"

namespace ember {
namespace {
const char* op_name(int tag) {
  switch (static_cast<kernels::OpTag>(tag)) {
    case kernels::OpTag::cross_entropy:
      return "cross_entropy";
    case kernels::OpTag::loss_check:
      return "loss check";
    case kernels::OpTag::embedding:
      return "embedding";
    case kernels::OpTag::none:
      break;
  }
  return "an op";
}

// Note [which bad input is reported] in kernels/common.h: the value is clamped beyond 24 bits.
const char* clamp_words(const kernels::DeviceErrorRecord& record) {
  return record.value_clamped() < 0 ? "at most " : record.value_clamped() > 0 ? "at least " : "";
}
}  // namespace

void throw_kernel_error(const kernels::DeviceErrorRecord& record, Device device) {
  const std::string where =
      device.is_cuda()
          ? detail::concat(" (raised on ", device,
                           " and reported at the next synchronization, so the op that "
                           "caused it has already returned; set EMBER_SYNC_DEBUG=1 to report it at its cause)")
          : std::string();
  switch (static_cast<kernels::DeviceErrorCode>(record.code)) {
    case kernels::DeviceErrorCode::target_out_of_range: {
      throw IndexError(detail::concat(op_name(record.op), ": target ", clamp_words(record), record.value(), " at row ",
                                      record.position(), " is out of range [0, ", record.bound, ")", where,
                                      ": targets must be class indices in [0, number of classes)"));
    }
    case kernels::DeviceErrorCode::index_out_of_range: {
      throw IndexError(detail::concat(op_name(record.op), ": index ", clamp_words(record), record.value(),
                                      " at position ", record.position(), " of the input is out of range [0, ",
                                      record.bound, ")", where,
                                      ": indices must name rows of the weight, [0, num_embeddings)"));
    }
    case kernels::DeviceErrorCode::non_finite:
      if (record.op == static_cast<int>(kernels::OpTag::loss_check))
        throw NonFiniteError(detail::concat("the training loss is not finite", where,
                                            ": the model diverged; try a smaller learning rate"));
      throw NonFiniteError(
          detail::concat(op_name(record.op), ": non-finite value at position ", record.position(), where));
    case kernels::DeviceErrorCode::none:
      break;
  }
  throw Error(detail::concat(op_name(record.op), ": unknown device-side error code ", record.code, where));
}
}  // namespace ember
