// Kernels covering the instruction classes a HIP program compiles to:
// saxpy, an LDS reduction, integer and 64-bit atomics, shuffles and
// ballots, private arrays and calls, double precision, transcendentals,
// 2-D grids and dynamic shared memory. Each checks its result on the host,
// so the same program serves the simulator's execution tests.
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                              \
    do {                                                                      \
        hipError_t e = (x);                                                   \
        if (e != hipSuccess) {                                                \
            std::fprintf(stderr, "%s: %s\n", #x, hipGetErrorString(e));       \
            std::exit(1);                                                     \
        }                                                                     \
    } while (0)

__global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void reduce_lds(const int* in, int* out, int n) {
    __shared__ int part[256];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    part[t] = i < n ? in[i] : 0;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = part[0];
}

__global__ void atomics(int* counter, unsigned long long* sum64, int* maxv, unsigned* bits) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(counter, 1);
    atomicAdd(sum64, (unsigned long long)i);
    atomicMax(maxv, i);
    atomicOr(bits, 1u << (i & 31));
    atomicCAS(counter + 1, 0, i + 1);
}

__global__ void shuffles(const int* in, int* out, unsigned long long* ballots) {
    int t = threadIdx.x;
    int v = in[blockIdx.x * blockDim.x + t];
    int sum = v;
    for (int off = 32; off > 0; off >>= 1) sum += __shfl_xor(sum, off);
    int up = __shfl_up(v, 1);
    int down = __shfl_down(v, 1);
    int lane0 = __shfl(v, 0);
    unsigned long long b = __ballot(v & 1);
    if (t == 0) ballots[blockIdx.x] = b;
    out[blockIdx.x * blockDim.x + t] = sum + up - down + lane0 + __popcll(b);
}

__device__ __noinline__ int walk(int* a, int n, int seed) {
    int s = 0;
    for (int k = 0; k < n; ++k) s += a[(k * seed) % n];
    return s;
}

__global__ void scratch_calls(int* out, int n) {
    int a[64];
    int t = threadIdx.x + blockIdx.x * blockDim.x;
    for (int k = 0; k < 64; ++k) a[k] = k * t + 1;
    out[t] = walk(a, n < 64 ? n : 64, t | 1);
}

__global__ void dgemv(const double* m, const double* v, double* r, int n) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    double acc = 0.0;
    for (int k = 0; k < n; ++k) acc = fma(m[row * n + k], v[k], acc);
    r[row] = sqrt(fabs(acc)) / (1.0 + acc * acc);
}

__global__ void transcendentals(const float* x, float* y, double* yd, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    y[i] = sinf(v) + cosf(v) * expf(-v) + logf(1.0f + v * v) + powf(fabsf(v), 0.3f) + tanhf(v);
    yd[i] = exp((double)v) - log1p((double)v * v) + sin((double)v);
}

__global__ void grid2d(float* img, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) img[y * w + x] = (float)(x * 3 + y * 7) / (float)(w + h);
}

__global__ void dynamic_lds(const float* in, float* out, int n) {
    extern __shared__ float tile[];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    tile[t] = i < n ? in[i] : 0.0f;
    __syncthreads();
    float v = tile[blockDim.x - 1 - t];
    if (i < n) out[i] = v * 2.0f + 1.0f;
}

__global__ void half_math(const __half* a, const __half* b, __half* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = __hfma(a[i], b[i], __float2half(0.5f));
}

int main() {
    const int n = 1024;
    std::vector<float> hx(n), hy(n);
    for (int i = 0; i < n; ++i) { hx[i] = (float)i; hy[i] = 1.0f; }
    float *dx, *dy;
    CHECK(hipMalloc(&dx, n * sizeof(float)));
    CHECK(hipMalloc(&dy, n * sizeof(float)));
    CHECK(hipMemcpy(dx, hx.data(), n * sizeof(float), hipMemcpyHostToDevice));
    CHECK(hipMemcpy(dy, hy.data(), n * sizeof(float), hipMemcpyHostToDevice));
    hipLaunchKernelGGL(saxpy, dim3(n / 256), dim3(256), 0, 0, n, 2.0f, dx, dy);
    CHECK(hipMemcpy(hy.data(), dy, n * sizeof(float), hipMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
        if (hy[i] != 2.0f * i + 1.0f) { std::fprintf(stderr, "saxpy[%d] = %f\n", i, hy[i]); return 1; }
    }

    std::vector<int> hi(n);
    for (int i = 0; i < n; ++i) hi[i] = i;
    int *din, *dout;
    CHECK(hipMalloc(&din, n * sizeof(int)));
    CHECK(hipMalloc(&dout, n * sizeof(int)));
    CHECK(hipMemcpy(din, hi.data(), n * sizeof(int), hipMemcpyHostToDevice));
    hipLaunchKernelGGL(reduce_lds, dim3(n / 256), dim3(256), 0, 0, din, dout, n);
    std::vector<int> parts(n / 256);
    CHECK(hipMemcpy(parts.data(), dout, parts.size() * sizeof(int), hipMemcpyDeviceToHost));
    long total = 0;
    for (int p : parts) total += p;
    if (total != (long)n * (n - 1) / 2) { std::fprintf(stderr, "reduce = %ld\n", total); return 1; }

    int* counter; unsigned long long* sum64; int* maxv; unsigned* bits;
    CHECK(hipMalloc(&counter, 2 * sizeof(int)));
    CHECK(hipMalloc(&sum64, sizeof(unsigned long long)));
    CHECK(hipMalloc(&maxv, sizeof(int)));
    CHECK(hipMalloc(&bits, sizeof(unsigned)));
    CHECK(hipMemset(counter, 0, 2 * sizeof(int)));
    CHECK(hipMemset(sum64, 0, sizeof(unsigned long long)));
    CHECK(hipMemset(maxv, 0, sizeof(int)));
    CHECK(hipMemset(bits, 0, sizeof(unsigned)));
    hipLaunchKernelGGL(atomics, dim3(n / 256), dim3(256), 0, 0, counter, sum64, maxv, bits);
    int hc[2]; unsigned long long hs; int hm; unsigned hb;
    CHECK(hipMemcpy(hc, counter, sizeof(hc), hipMemcpyDeviceToHost));
    CHECK(hipMemcpy(&hs, sum64, sizeof(hs), hipMemcpyDeviceToHost));
    CHECK(hipMemcpy(&hm, maxv, sizeof(hm), hipMemcpyDeviceToHost));
    CHECK(hipMemcpy(&hb, bits, sizeof(hb), hipMemcpyDeviceToHost));
    if (hc[0] != n || hs != (unsigned long long)n * (n - 1) / 2 || hm != n - 1 || hb != 0xffffffffu || hc[1] == 0) {
        std::fprintf(stderr, "atomics: %d %llu %d %x %d\n", hc[0], hs, hm, hb, hc[1]);
        return 1;
    }

    unsigned long long* dballots;
    CHECK(hipMalloc(&dballots, (n / 64) * sizeof(unsigned long long)));
    hipLaunchKernelGGL(shuffles, dim3(n / 64), dim3(64), 0, 0, din, dout, dballots);
    std::vector<int> hs2(n);
    CHECK(hipMemcpy(hs2.data(), dout, n * sizeof(int), hipMemcpyDeviceToHost));
    for (int blk = 0; blk < n / 64; ++blk) {
        int sum = 0;
        for (int t = 0; t < 64; ++t) sum += blk * 64 + t;
        for (int t = 0; t < 64; ++t) {
            int v = blk * 64 + t;
            int up = t > 0 ? v - 1 : v;
            int down = t < 63 ? v + 1 : v;
            int want = sum + up - down + blk * 64 + 32;
            if (hs2[v] != want) { std::fprintf(stderr, "shuffle[%d] = %d, want %d\n", v, hs2[v], want); return 1; }
        }
    }

    hipLaunchKernelGGL(scratch_calls, dim3(4), dim3(64), 0, 0, dout, 48);
    CHECK(hipMemcpy(hi.data(), dout, 256 * sizeof(int), hipMemcpyDeviceToHost));
    for (int t = 0; t < 256; ++t) {
        int a[64];
        for (int k = 0; k < 64; ++k) a[k] = k * t + 1;
        int s = 0;
        for (int k = 0; k < 48; ++k) s += a[(k * (t | 1)) % 48];
        if (hi[t] != s) { std::fprintf(stderr, "scratch[%d] = %d, want %d\n", t, hi[t], s); return 1; }
    }

    const int m = 64;
    std::vector<double> hm2(m * m), hv(m), hr(m);
    for (int i = 0; i < m * m; ++i) hm2[i] = (i % 7) * 0.25;
    for (int i = 0; i < m; ++i) hv[i] = 1.0 / (i + 1);
    double *dm, *dv, *dr;
    CHECK(hipMalloc(&dm, m * m * sizeof(double)));
    CHECK(hipMalloc(&dv, m * sizeof(double)));
    CHECK(hipMalloc(&dr, m * sizeof(double)));
    CHECK(hipMemcpy(dm, hm2.data(), m * m * sizeof(double), hipMemcpyHostToDevice));
    CHECK(hipMemcpy(dv, hv.data(), m * sizeof(double), hipMemcpyHostToDevice));
    hipLaunchKernelGGL(dgemv, dim3(1), dim3(m), 0, 0, dm, dv, dr, m);
    CHECK(hipMemcpy(hr.data(), dr, m * sizeof(double), hipMemcpyDeviceToHost));
    for (int row = 0; row < m; ++row) {
        double acc = 0.0;
        for (int k = 0; k < m; ++k) acc = std::fma(hm2[row * m + k], hv[k], acc);
        double want = std::sqrt(std::fabs(acc)) / (1.0 + acc * acc);
        if (std::fabs(hr[row] - want) > 1e-12) { std::fprintf(stderr, "dgemv[%d]\n", row); return 1; }
    }

    float* dyf; double* dyd;
    CHECK(hipMalloc(&dyf, n * sizeof(float)));
    CHECK(hipMalloc(&dyd, n * sizeof(double)));
    for (int i = 0; i < n; ++i) hx[i] = (float)i / n;
    CHECK(hipMemcpy(dx, hx.data(), n * sizeof(float), hipMemcpyHostToDevice));
    hipLaunchKernelGGL(transcendentals, dim3(n / 256), dim3(256), 0, 0, dx, dyf, dyd, n);
    std::vector<float> hyf(n); std::vector<double> hyd(n);
    CHECK(hipMemcpy(hyf.data(), dyf, n * sizeof(float), hipMemcpyDeviceToHost));
    CHECK(hipMemcpy(hyd.data(), dyd, n * sizeof(double), hipMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
        float v = hx[i];
        float want = std::sin(v) + std::cos(v) * std::exp(-v) + std::log(1.0f + v * v) + std::pow(std::fabs(v), 0.3f) + std::tanh(v);
        double wantd = std::exp((double)v) - std::log1p((double)v * v) + std::sin((double)v);
        if (std::fabs(hyf[i] - want) > 1e-4f || std::fabs(hyd[i] - wantd) > 1e-12) { std::fprintf(stderr, "transcendental[%d]\n", i); return 1; }
    }

    const int w = 100, h = 37;
    float* dimg;
    CHECK(hipMalloc(&dimg, w * h * sizeof(float)));
    hipLaunchKernelGGL(grid2d, dim3((w + 15) / 16, (h + 15) / 16), dim3(16, 16), 0, 0, dimg, w, h);
    std::vector<float> himg(w * h);
    CHECK(hipMemcpy(himg.data(), dimg, w * h * sizeof(float), hipMemcpyDeviceToHost));
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
            if (himg[y * w + x] != (float)(x * 3 + y * 7) / (float)(w + h)) { std::fprintf(stderr, "grid2d[%d,%d]\n", x, y); return 1; }

    hipLaunchKernelGGL(dynamic_lds, dim3(n / 128), dim3(128), 128 * sizeof(float), 0, dx, dy, n);
    CHECK(hipMemcpy(hy.data(), dy, n * sizeof(float), hipMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
        int blk = i / 128, t = i % 128;
        float v = hx[blk * 128 + 127 - t];
        float want = v * 2.0f + 1.0f;
        if (hy[i] != want) { std::fprintf(stderr, "dynamic_lds[%d]\n", i); return 1; }
    }

    std::vector<__half> ha(n), hbh(n), hc2(n);
    for (int i = 0; i < n; ++i) { ha[i] = __float2half((float)(i % 17)); hbh[i] = __float2half(0.25f); }
    __half *da, *db, *dc;
    CHECK(hipMalloc(&da, n * sizeof(__half)));
    CHECK(hipMalloc(&db, n * sizeof(__half)));
    CHECK(hipMalloc(&dc, n * sizeof(__half)));
    CHECK(hipMemcpy(da, ha.data(), n * sizeof(__half), hipMemcpyHostToDevice));
    CHECK(hipMemcpy(db, hbh.data(), n * sizeof(__half), hipMemcpyHostToDevice));
    hipLaunchKernelGGL(half_math, dim3(n / 256), dim3(256), 0, 0, da, db, dc, n);
    CHECK(hipMemcpy(hc2.data(), dc, n * sizeof(__half), hipMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
        if (__half2float(hc2[i]) != (float)(i % 17) * 0.25f + 0.5f) { std::fprintf(stderr, "half_math[%d]\n", i); return 1; }
    }

    std::puts("kernels: all results match");
    return 0;
}
