// Streams and events: the stream and event API (create, destroy, record, wait, synchronize, query,
// elapsed time) and the capture rules particular to them.
#include <chrono>

#include "state.h"

using namespace ember_sim::rt;

namespace {
// The stream a synchronization or query names; one being captured cannot be waited for.
cudaError_t stream_to_wait_for(Runtime& rt, cudaStream_t handle, const char* call, Stream** s) {
  *s = resolve(rt, handle);
  if (!*s) return cudaErrorInvalidResourceHandle;
  return conflicts_with_capture(rt, *s, cudaErrorStreamCaptureUnsupported, call);
}

// Whether the operation `last` (a stream's last, an event's record; none: nothing to wait for) has
// run: if so the host has synchronized with it, if not it is needed now.
cudaError_t query(Runtime& rt, const OpPtr& last) {
  if (!last || last->done) {
    if (last) join(rt.host_clock, last->clock);
    return cudaSuccess;
  }
  release_through(rt, last);
  return cudaErrorNotReady;
}

// An event last recorded inside a capture in progress cannot be waited for or queried.
cudaError_t captured_event_conflict(Runtime& rt, const Event& e, const char* call) {
  if (e.captured_in == 0) return cudaSuccess;
  for (Stream* s : rt.streams)
    if (s->capture && s->capture->id == e.captured_in)
      return conflicts_with_capture(rt, s, cudaErrorStreamCaptureUnsupported, call);
  return cudaSuccess;
}

// The event a synchronization or query names; one recorded in a capture in progress cannot be
// waited for.
cudaError_t event_to_wait_for(Runtime& rt, cudaEvent_t handle, const char* call, Event** e) {
  *e = reinterpret_cast<Event*>(handle);
  if (!rt.events.count(*e)) return cudaErrorInvalidResourceHandle;
  return captured_event_conflict(rt, **e, call);
}
}  // namespace

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (!stream) return cudaErrorInvalidValue;
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  note_context_use(t_device);
  *stream = reinterpret_cast<cudaStream_t>(new_stream(rt, t_device, !(flags & cudaStreamNonBlocking), false));
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Stream* s = resolve(rt, stream);
  if (!s || s->legacy) return record_error(cudaErrorInvalidResourceHandle);
  if (s->capture) return record_error(cudaErrorIllegalState);  // end the capture first
  // As in CUDA, work already issued still runs; the worker ends when it is done.
  if (s->last) release_through(rt, s->last);
  s->destroyed = true;
  rt.streams.erase(s);
  rt.destroyed[s] = s->id;
  rt.changed.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  Stream* s = nullptr;
  if (cudaError_t e = stream_to_wait_for(rt, stream, "cudaStreamSynchronize", &s)) return record_error(e);
  if (cudaError_t e = unsafe_during_capture(rt, "cudaStreamSynchronize")) return record_error(e);
  wait_done(rt, lock, s->last);
  return record_error(sticky_error(rt, s->device));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Stream* s = nullptr;
  if (cudaError_t e = stream_to_wait_for(rt, stream, "cudaStreamQuery", &s)) return record_error(e);
  return query(rt, s->last);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Stream* s = resolve(rt, stream);
  auto* e = reinterpret_cast<Event*>(event);
  if (!s || !rt.events.count(e)) return record_error(cudaErrorInvalidResourceHandle);
  if (capturing(s)) {
    // Within one capture an event orders nothing more than the stream already does; one recorded
    // outside it would be a dependency the graph cannot hold.
    if (e->captured_in == s->capture->id || !e->record) return cudaSuccess;
    return record_error(conflicts_with_capture(rt, s, cudaErrorStreamCaptureIsolation,
                                               "cudaStreamWaitEvent on an event recorded outside the capture"));
  }
  // Joining another stream into a capture through an event recorded in it is not modelled.
  if (e->captured_in != 0) return record_error(cudaErrorStreamCaptureUnsupported);
  if (cudaError_t le = legacy_conflict(rt, s)) return record_error(le);
  if (!e->record) return cudaSuccess;  // an event never recorded is complete
  enqueue(rt, s, "cudaStreamWaitEvent", {}, nullptr, e->record);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (!event) return cudaErrorInvalidValue;
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* e = new Event;
  e->device = t_device;
  e->timing = !(flags & cudaEventDisableTiming);
  rt.events.insert(e);
  *event = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* e = reinterpret_cast<Event*>(event);
  if (!rt.events.erase(e)) return record_error(cudaErrorInvalidResourceHandle);
  delete e;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Stream* s = resolve(rt, stream);
  auto* e = reinterpret_cast<Event*>(event);
  if (!s || !rt.events.count(e)) return record_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t le = legacy_conflict(rt, s)) return record_error(le);
  // Inside a capture the record is a point in the graph, not a node: nothing outside may wait for
  // or query it until the capture ends.
  e->captured_in = capturing(s) ? s->capture->id : 0;
  e->record = capturing(s) ? nullptr : enqueue(rt, s, "cudaEventRecord", {}, nullptr);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Runtime& rt = runtime();
  std::unique_lock<std::mutex> lock(rt.mutex);
  Event* e = nullptr;
  if (cudaError_t c = event_to_wait_for(rt, event, "cudaEventSynchronize", &e)) return record_error(c);
  if (cudaError_t c = unsafe_during_capture(rt, "cudaEventSynchronize")) return record_error(c);
  const OpPtr record = e->record;
  wait_done(rt, lock, record);
  return record_error(sticky_error(rt, e->device));
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Event* e = nullptr;
  if (cudaError_t c = event_to_wait_for(rt, event, "cudaEventQuery", &e)) return record_error(c);
  return query(rt, e->record);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto* a = reinterpret_cast<Event*>(start);
  auto* b = reinterpret_cast<Event*>(end);
  if (!ms || !rt.events.count(a) || !rt.events.count(b)) return record_error(cudaErrorInvalidResourceHandle);
  if (!a->timing || !b->timing) return record_error(cudaErrorInvalidResourceHandle);
  if (!a->record || !b->record) return record_error(cudaErrorInvalidResourceHandle);
  if (!a->record->done || !b->record->done) return record_error(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(b->record->finished - a->record->finished).count();
  return cudaSuccess;
}
