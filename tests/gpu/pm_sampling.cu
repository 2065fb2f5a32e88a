// What CUPTI's PM sampling gives on this GPU, for issue 50 (device counters joined to kernels): whether this process
// may use it at all (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES where profiling is restricted to admins), which metrics the
// chip offers and which of the ones cuflight wants fit in one pass, and whether the sampled counters agree with
// figures computed without them:
//   copy   a streaming float4 copy: bytes moved / kernel time, against the DRAM counters of the samples inside it;
//   fma    a loop of dependent FMAs on registers: SM busy, DRAM idle;
//   gemm   cuBLAS bf16 GEMMs: 2*m*n*k / time, against the tensor-pipe counters.
// Each workload also runs without sampling (before Start) so that the cost of sampling shows side by side.
// Usage: pm_sampling OUT_DIR [interval_ns]. Writes OUT_DIR/pm-base-metrics.txt and OUT_DIR/pm-sampling.json.
// API facts from cupti_pmsampling.h and cupti_profiler_host.h (CUDA 12.6+) and the CUPTI guide's PM sampling
// section; the flow (enable, host config, set config, counter data image, start, decode, evaluate) is theirs.
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_target.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

static FILE* g_json;

static const char* cupti_error(CUptiResult r) {
  const char* s = "?";
  cuptiGetResultString(r, &s);
  return s;
}

#define CUDA_OK(x)                                                           \
  do {                                                                       \
    cudaError_t e_ = (x);                                                    \
    if (e_ != cudaSuccess) {                                                 \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,              \
              cudaGetErrorString(e_));                                       \
      exit(2);                                                               \
    }                                                                        \
  } while (0)

// A CUPTI call that must work once sampling was allowed: its failure is a finding, written to the JSON, then exit.
#define CUPTI_OK(x)                                                          \
  do {                                                                       \
    CUptiResult r_ = (x);                                                    \
    if (r_ != CUPTI_SUCCESS) {                                               \
      fprintf(stderr, "%s:%d %s: %d %s\n", __FILE__, __LINE__, #x, (int)r_,  \
              cupti_error(r_));                                              \
      fprintf(g_json, "\"failed\": {\"call\": \"%s\", \"code\": %d, \"error\": \"%s\"}}\n", #x, \
              (int)r_, cupti_error(r_));                                     \
      fclose(g_json);                                                        \
      exit(3);                                                               \
    }                                                                        \
  } while (0)

__global__ void stream_copy(const float4* __restrict__ in, float4* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = in[i];
}

__global__ void fma_loop(float* out, int iterations) {
  float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 1e-4f, d = 0.5f;
  for (int i = 0; i < iterations; i++) {
    a = fmaf(a, b, c);
    d = fmaf(d, b, c);
  }
  if (a + d == 12345.0f) out[threadIdx.x] = a + d;  // never true: keeps the loop without a store
}

static uint64_t cupti_now() {
  uint64_t t = 0;
  cuptiGetTimestamp(&t);
  return t;
}

// A host object for PM sampling on this chip, with the given metrics added; its number of passes, or 0 when the
// metrics were refused (reason in *why).
struct HostConfig {
  CUpti_Profiler_Host_Object* host = nullptr;
  std::vector<uint8_t> image;
  size_t passes = 0;
};

static HostConfig make_config(const char* chip, const std::vector<uint8_t>& availability,
                              const std::vector<const char*>& metrics, CUptiResult* why) {
  HostConfig c;
  CUpti_Profiler_Host_Initialize_Params init = {CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
  init.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING;
  init.pChipName = chip;
  init.pCounterAvailabilityImage = availability.data();
  *why = cuptiProfilerHostInitialize(&init);
  if (*why != CUPTI_SUCCESS) return c;
  c.host = init.pHostObject;
  CUpti_Profiler_Host_ConfigAddMetrics_Params add = {CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
  add.pHostObject = c.host;
  add.ppMetricNames = const_cast<const char**>(metrics.data());
  add.numMetrics = metrics.size();
  *why = cuptiProfilerHostConfigAddMetrics(&add);
  if (*why != CUPTI_SUCCESS) return c;
  CUpti_Profiler_Host_GetConfigImageSize_Params size = {CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
  size.pHostObject = c.host;
  *why = cuptiProfilerHostGetConfigImageSize(&size);
  if (*why != CUPTI_SUCCESS) return c;
  c.image.resize(size.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params get = {CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
  get.pHostObject = c.host;
  get.configImageSize = c.image.size();
  get.pConfigImage = c.image.data();
  *why = cuptiProfilerHostGetConfigImage(&get);
  if (*why != CUPTI_SUCCESS) return c;
  CUpti_Profiler_Host_GetNumOfPasses_Params passes = {CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
  passes.configImageSize = c.image.size();
  passes.pConfigImage = c.image.data();
  *why = cuptiProfilerHostGetNumOfPasses(&passes);
  if (*why == CUPTI_SUCCESS) c.passes = passes.numOfPasses;
  return c;
}

static void drop_config(HostConfig& c) {
  if (!c.host) return;
  CUpti_Profiler_Host_Deinitialize_Params p = {CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
  p.pHostObject = c.host;
  cuptiProfilerHostDeinitialize(&p);
  c.host = nullptr;
}

struct Phase {
  const char* name;
  uint64_t begin = 0, end = 0;  // CUPTI timestamps around the phase (after a synchronize)
  float ms = 0;                 // cudaEvent time of the phase's kernels
  double work = 0;              // bytes (copy) or FLOPs (gemm)
};

// Runs the three workloads once; each phase's CUPTI begin/end and event time.
struct Workloads {
  size_t n4 = (size_t)1 << 27;  // float4s: 2 GiB each way
  float4 *in = nullptr, *out = nullptr;
  float* sink = nullptr;
  int m = 8192;
  __nv_bfloat16 *A = nullptr, *B = nullptr, *C = nullptr;
  cublasHandle_t blas;
  cudaEvent_t e0, e1;

  void setup() {
    CUDA_OK(cudaMalloc(&in, n4 * sizeof(float4)));
    CUDA_OK(cudaMalloc(&out, n4 * sizeof(float4)));
    CUDA_OK(cudaMemset(in, 1, n4 * sizeof(float4)));
    CUDA_OK(cudaMalloc(&sink, 4096));
    size_t mm = (size_t)m * m * sizeof(__nv_bfloat16);
    CUDA_OK(cudaMalloc(&A, mm));
    CUDA_OK(cudaMalloc(&B, mm));
    CUDA_OK(cudaMalloc(&C, mm));
    CUDA_OK(cudaMemset(A, 0, mm));
    CUDA_OK(cudaMemset(B, 0, mm));
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) exit(2);
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
  }

  void run(std::vector<Phase>& phases) {
    phases.clear();
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    for (int which = 0; which < 3; which++) {
      Phase p;
      p.name = which == 0 ? "copy" : which == 1 ? "fma" : "gemm";
      CUDA_OK(cudaDeviceSynchronize());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      p.begin = cupti_now();
      CUDA_OK(cudaEventRecord(e0));
      if (which == 0) {
        for (int r = 0; r < 100; r++) stream_copy<<<sms * 8, 512>>>(in, out, n4);
        p.work = 100.0 * 2 * n4 * sizeof(float4);
      } else if (which == 1) {
        for (int r = 0; r < 100; r++) fma_loop<<<sms * 16, 256>>>(sink, 100000);
      } else {
        float one = 1, zero = 0;
        for (int r = 0; r < 40; r++)
          cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, A, CUDA_R_16BF, m, B, CUDA_R_16BF, m,
                       &zero, C, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        p.work = 40.0 * 2 * (double)m * m * m;
      }
      CUDA_OK(cudaEventRecord(e1));
      CUDA_OK(cudaEventSynchronize(e1));
      p.end = cupti_now();
      CUDA_OK(cudaEventElapsedTime(&p.ms, e0, e1));
      phases.push_back(p);
    }
  }
};

static void write_phases(const char* key, const std::vector<Phase>& phases) {
  fprintf(g_json, "\"%s\": {", key);
  for (size_t i = 0; i < phases.size(); i++) {
    const Phase& p = phases[i];
    double rate = p.ms > 0 ? p.work / (p.ms * 1e-3) : 0;
    printf("%-10s %-5s %9.3f ms  %10.1f G/s (bytes or FLOPs)\n", key, p.name, p.ms, rate / 1e9);
    fprintf(g_json, "%s\"%s\": {\"ms\": %.4f, \"work_per_s\": %.6g, \"cupti_ns\": %llu}", i ? ", " : "", p.name,
            p.ms, rate, (unsigned long long)(p.end - p.begin));
  }
  fprintf(g_json, "},\n");
}

// The metrics cuflight wants (SM activity, tensor pipes, DRAM, PCIe, NVLink), under the names Nsight Compute uses
// for them; each is tried alone, then added to one set while the set stays one pass.
static const char* kCandidates[] = {
    "sm__cycles_active.avg",
    "sm__cycles_elapsed.avg",
    "gr__cycles_active.avg",
    "gr__cycles_elapsed.max",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__read_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__write_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "pcie__read_bytes.sum",
    "pcie__write_bytes.sum",
    "nvlrx__bytes.sum",
    "nvltx__bytes.sum",
};

static void list_base_metrics(CUpti_Profiler_Host_Object* host, const std::string& path) {
  FILE* f = fopen(path.c_str(), "w");
  if (!f) return;
  size_t total = 0;
  for (int type = 0; type < CUPTI_METRIC_TYPE__COUNT; type++) {
    CUpti_Profiler_Host_GetBaseMetrics_Params p = {CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE};
    p.pHostObject = host;
    p.metricType = (CUpti_MetricType)type;
    CUptiResult r = cuptiProfilerHostGetBaseMetrics(&p);
    if (r != CUPTI_SUCCESS) {
      fprintf(f, "# type %d: %s\n", type, cupti_error(r));
      continue;
    }
    for (size_t i = 0; i < p.numMetrics; i++) fprintf(f, "%d %s\n", type, p.ppMetricNames[i]);
    total += p.numMetrics;
  }
  fclose(f);
  printf("base metrics: %zu (listed in %s)\n", total, path.c_str());
  fprintf(g_json, "\"base_metrics\": %zu,\n", total);
}

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : ".";
  uint64_t interval_ns = argc > 2 ? strtoull(argv[2], nullptr, 10) : 20000;
  g_json = fopen((dir + "/pm-sampling.json").c_str(), "w");
  if (!g_json) return 2;
  fprintf(g_json, "{\"interval_ns\": %llu,\n", (unsigned long long)interval_ns);
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaFree(0));
  Workloads w;
  w.setup();
  std::vector<Phase> plain;
  w.run(plain);  // warm-up: cuBLAS picks its kernel, clocks rise
  w.run(plain);
  write_phases("plain", plain);

  CUpti_Profiler_Initialize_Params pinit = {CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
  CUPTI_OK(cuptiProfilerInitialize(&pinit));
  CUpti_Device_GetChipName_Params chip = {CUpti_Device_GetChipName_Params_STRUCT_SIZE};
  chip.deviceIndex = 0;
  CUPTI_OK(cuptiDeviceGetChipName(&chip));
  printf("chip: %s\n", chip.pChipName);
  fprintf(g_json, "\"chip\": \"%s\",\n", chip.pChipName);

  // Where profiling is restricted, this is where it shows: the availability image or Enable.
  CUpti_PmSampling_GetCounterAvailability_Params avail = {CUpti_PmSampling_GetCounterAvailability_Params_STRUCT_SIZE};
  avail.deviceIndex = 0;
  CUptiResult r = cuptiPmSamplingGetCounterAvailability(&avail);
  std::vector<uint8_t> availability(r == CUPTI_SUCCESS ? avail.counterAvailabilityImageSize : 0);
  if (r == CUPTI_SUCCESS) {
    avail.pCounterAvailabilityImage = availability.data();
    r = cuptiPmSamplingGetCounterAvailability(&avail);
  }
  CUpti_PmSampling_Enable_Params enable = {CUpti_PmSampling_Enable_Params_STRUCT_SIZE};
  enable.deviceIndex = 0;
  CUptiResult re = r == CUPTI_SUCCESS ? cuptiPmSamplingEnable(&enable) : r;
  printf("availability: %s, enable: %s\n", cupti_error(r), cupti_error(re));
  fprintf(g_json, "\"availability\": \"%s\", \"enable\": \"%s\",\n", cupti_error(r), cupti_error(re));
  if (re != CUPTI_SUCCESS) {
    fprintf(g_json, "\"available\": false}\n");
    fclose(g_json);
    return 0;
  }
  fprintf(g_json, "\"available\": true,\n");

  // Which candidates the chip takes alone, then one single-pass set of them.
  CUptiResult why;
  std::vector<const char*> chosen;
  fprintf(g_json, "\"alone\": {");
  bool first = true;
  for (const char* m : kCandidates) {
    HostConfig c = make_config(chip.pChipName, availability, {m}, &why);
    if (first && c.host) list_base_metrics(c.host, dir + "/pm-base-metrics.txt");
    printf("alone %-75s passes %zu %s\n", m, c.passes, c.passes ? "" : cupti_error(why));
    fprintf(g_json, "%s\"%s\": %zu", first ? "" : ", ", m, c.passes);
    first = false;
    drop_config(c);
    if (c.passes != 1) continue;
    chosen.push_back(m);
    HostConfig all = make_config(chip.pChipName, availability, chosen, &why);
    if (all.passes != 1) chosen.pop_back();
    drop_config(all);
  }
  fprintf(g_json, "},\n\"chosen\": [");
  for (size_t i = 0; i < chosen.size(); i++) fprintf(g_json, "%s\"%s\"", i ? ", " : "", chosen[i]);
  fprintf(g_json, "],\n");
  printf("one pass holds %zu of them\n", chosen.size());
  if (chosen.empty()) {
    fprintf(g_json, "\"sampled\": false}\n");
    fclose(g_json);
    return 0;
  }

  HostConfig config = make_config(chip.pChipName, availability, chosen, &why);
  CUPTI_OK(why);
  CUpti_PmSampling_SetConfig_Params set = {CUpti_PmSampling_SetConfig_Params_STRUCT_SIZE};
  set.pPmSamplingObject = enable.pPmSamplingObject;
  set.configSize = config.image.size();
  set.pConfig = config.image.data();
  set.hardwareBufferSize = (size_t)512 << 20;
  set.samplingInterval = interval_ns;
  set.triggerMode = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
  set.hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;
  CUPTI_OK(cuptiPmSamplingSetConfig(&set));
  CUpti_PmSampling_GetCounterDataSize_Params dsize = {CUpti_PmSampling_GetCounterDataSize_Params_STRUCT_SIZE};
  dsize.pPmSamplingObject = enable.pPmSamplingObject;
  dsize.pMetricNames = chosen.data();
  dsize.numMetrics = chosen.size();
  dsize.maxSamples = 60000;
  CUPTI_OK(cuptiPmSamplingGetCounterDataSize(&dsize));
  std::vector<uint8_t> data(dsize.counterDataSize);
  CUpti_PmSampling_CounterDataImage_Initialize_Params dinit = {
      CUpti_PmSampling_CounterDataImage_Initialize_Params_STRUCT_SIZE};
  dinit.pPmSamplingObject = enable.pPmSamplingObject;
  dinit.counterDataSize = data.size();
  dinit.pCounterData = data.data();
  CUPTI_OK(cuptiPmSamplingCounterDataImageInitialize(&dinit));
  printf("counter data image: %zu bytes for %u samples of %zu metrics\n", data.size(), dsize.maxSamples,
         chosen.size());
  fprintf(g_json, "\"counter_data_bytes\": %zu, \"max_samples\": %u,\n", data.size(), dsize.maxSamples);

  CUpti_PmSampling_Start_Params start = {CUpti_PmSampling_Start_Params_STRUCT_SIZE};
  start.pPmSamplingObject = enable.pPmSamplingObject;
  auto t0 = std::chrono::steady_clock::now();
  CUPTI_OK(cuptiPmSamplingStart(&start));
  auto t1 = std::chrono::steady_clock::now();
  std::vector<Phase> sampled;
  w.run(sampled);
  CUpti_PmSampling_Stop_Params stop = {CUpti_PmSampling_Stop_Params_STRUCT_SIZE};
  stop.pPmSamplingObject = enable.pPmSamplingObject;
  auto t2 = std::chrono::steady_clock::now();
  CUPTI_OK(cuptiPmSamplingStop(&stop));
  auto t3 = std::chrono::steady_clock::now();
  write_phases("sampled", sampled);
  std::vector<Phase> after;
  w.run(after);
  write_phases("plain_after", after);

  CUpti_PmSampling_DecodeData_Params decode = {CUpti_PmSampling_DecodeData_Params_STRUCT_SIZE};
  decode.pPmSamplingObject = enable.pPmSamplingObject;
  decode.pCounterDataImage = data.data();
  decode.counterDataImageSize = data.size();
  auto t4 = std::chrono::steady_clock::now();
  CUPTI_OK(cuptiPmSamplingDecodeData(&decode));
  auto t5 = std::chrono::steady_clock::now();
  CUpti_PmSampling_GetCounterDataInfo_Params info = {CUpti_PmSampling_GetCounterDataInfo_Params_STRUCT_SIZE};
  info.pCounterDataImage = data.data();
  info.counterDataImageSize = data.size();
  CUPTI_OK(cuptiPmSamplingGetCounterDataInfo(&info));
  auto us = [](auto a, auto b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
  printf("start %.0f us, stop %.0f us, decode %.0f us; stop reason %d, overflow %d; samples %zu completed of %zu\n",
         us(t0, t1), us(t2, t3), us(t4, t5), (int)decode.decodeStopReason, (int)decode.overflow,
         info.numCompletedSamples, info.numTotalSamples);
  fprintf(g_json,
          "\"start_us\": %.1f, \"stop_us\": %.1f, \"decode_us\": %.1f, \"stop_reason\": %d, \"overflow\": %d, "
          "\"samples\": %zu,\n",
          us(t0, t1), us(t2, t3), us(t4, t5), (int)decode.decodeStopReason, (int)decode.overflow,
          info.numCompletedSamples);

  // Each sample's values, averaged per phase by where its start falls; the first samples' timestamps against
  // the CUPTI clock read around the phases say whether they share a clock.
  std::vector<double> values(chosen.size());
  std::vector<std::vector<double>> sums(sampled.size(), std::vector<double>(chosen.size()));
  std::vector<size_t> counts(sampled.size());
  uint64_t first_start = 0, last_end = 0, min_len = UINT64_MAX, max_len = 0;
  auto te0 = std::chrono::steady_clock::now();
  for (size_t s = 0; s < info.numCompletedSamples; s++) {
    CUpti_PmSampling_CounterData_GetSampleInfo_Params si = {
        CUpti_PmSampling_CounterData_GetSampleInfo_Params_STRUCT_SIZE};
    si.pPmSamplingObject = enable.pPmSamplingObject;
    si.pCounterDataImage = data.data();
    si.counterDataImageSize = data.size();
    si.sampleIndex = s;
    CUPTI_OK(cuptiPmSamplingCounterDataGetSampleInfo(&si));
    CUpti_Profiler_Host_EvaluateToGpuValues_Params ev = {CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
    ev.pHostObject = config.host;
    ev.pCounterDataImage = data.data();
    ev.counterDataImageSize = data.size();
    ev.rangeIndex = s;
    ev.ppMetricNames = chosen.data();
    ev.numMetrics = chosen.size();
    ev.pMetricValues = values.data();
    CUPTI_OK(cuptiProfilerHostEvaluateToGpuValues(&ev));
    if (s == 0) first_start = si.startTimestamp;
    last_end = si.endTimestamp;
    uint64_t len = si.endTimestamp - si.startTimestamp;
    if (len < min_len) min_len = len;
    if (len > max_len) max_len = len;
    for (size_t p = 0; p < sampled.size(); p++) {
      if (si.startTimestamp >= sampled[p].begin && si.endTimestamp <= sampled[p].end) {
        counts[p]++;
        for (size_t k = 0; k < chosen.size(); k++) sums[p][k] += values[k];
      }
    }
  }
  auto te1 = std::chrono::steady_clock::now();
  printf("evaluate: %.2f us a sample; samples span %llu..%llu, phases %llu..%llu; sample length %llu..%llu ns\n",
         info.numCompletedSamples ? us(te0, te1) / info.numCompletedSamples : 0.0, (unsigned long long)first_start,
         (unsigned long long)last_end, (unsigned long long)sampled.front().begin,
         (unsigned long long)sampled.back().end, (unsigned long long)min_len, (unsigned long long)max_len);
  fprintf(g_json,
          "\"evaluate_us_per_sample\": %.3f, \"first_sample_start\": %llu, \"last_sample_end\": %llu, "
          "\"phases_begin\": %llu, \"phases_end\": %llu, \"sample_ns_min\": %llu, \"sample_ns_max\": %llu,\n",
          info.numCompletedSamples ? us(te0, te1) / info.numCompletedSamples : 0.0, (unsigned long long)first_start,
          (unsigned long long)last_end, (unsigned long long)sampled.front().begin,
          (unsigned long long)sampled.back().end, (unsigned long long)min_len, (unsigned long long)max_len);
  fprintf(g_json, "\"per_phase\": {");
  for (size_t p = 0; p < sampled.size(); p++) {
    fprintf(g_json, "%s\"%s\": {\"samples\": %zu", p ? ", " : "", sampled[p].name, counts[p]);
    printf("phase %-5s samples %zu\n", sampled[p].name, counts[p]);
    for (size_t k = 0; k < chosen.size(); k++) {
      double mean = counts[p] ? sums[p][k] / counts[p] : 0;
      printf("  %-75s %.6g\n", chosen[k], mean);
      fprintf(g_json, ", \"%s\": %.6g", chosen[k], mean);
    }
    fprintf(g_json, "}");
  }
  fprintf(g_json, "}}\n");
  fclose(g_json);
  drop_config(config);
  CUpti_PmSampling_Disable_Params dis = {CUpti_PmSampling_Disable_Params_STRUCT_SIZE};
  dis.pPmSamplingObject = enable.pPmSamplingObject;
  cuptiPmSamplingDisable(&dis);
  return 0;
}
