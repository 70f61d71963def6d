/* zero_to_fp32: rebuild full fp32 (or fp16/bf16) weights from a checkpoint's
 * per-rank shards as safetensors, or verify a checkpoint.
 *
 *   zero_to_fp32 CKPT_DIR OUT [--tag T] [--max-shard-size 5GB] [--dtype fp32|fp16|bf16]
 *   zero_to_fp32 --verify CKPT_DIR [--tag T]
 *
 * OUT ending in .safetensors: one file. Otherwise a folder holding
 * model.safetensors, or model-0000i-of-0000N.safetensors shards and
 * model.safetensors.index.json, as transformers' save_pretrained writes them.
 * Exit status: 0 done, 1 failed (one line on stderr naming the file), 2 usage. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "engine/io/safetensors.h"

static const char k_usage[] =
    "usage: zero_to_fp32 CKPT_DIR OUT [--tag T] [--max-shard-size SIZE] [--dtype fp32|fp16|bf16]\n"
    "       zero_to_fp32 --verify CKPT_DIR [--tag T]\n"
    "\n"
    "Rebuild the full weights of a zero-engine checkpoint as safetensors, streaming one\n"
    "frame at a time (memory stays a few MiB whatever the model size), or check a\n"
    "checkpoint's completeness and every checksum without converting.\n"
    "\n"
    "  CKPT_DIR              the folder given to ds_save_checkpoint (holds `latest`)\n"
    "  OUT                   FILE.safetensors, or a folder for model.safetensors /\n"
    "                        model-0000i-of-0000N.safetensors + model.safetensors.index.json\n"
    "  --tag T               the checkpoint to read (default: the one CKPT_DIR/latest names)\n"
    "  --max-shard-size SIZE folder output: largest shard, as transformers' max_shard_size\n"
    "                        (5GB = 5e9 bytes, 500MB, 2GiB, or bytes; default 5GB)\n"
    "  --dtype fp32|fp16|bf16  output precision (default fp32; others round to nearest even)\n"
    "  --verify              check instead of converting\n";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "zero_to_fp32: %s%s (see zero_to_fp32 --help)\n", msg, arg ? arg : "");
    return 2;
}

static int failed(const char *what) {
    fprintf(stderr, "zero_to_fp32: %s: %s\n", what, ds_last_error());
    return 1;
}

int main(int argc, char **argv) {
    enum { O_TAG = 256, O_SHARD, O_DTYPE, O_VERIFY, O_HELP };
    static const struct option k_long[] = {
        {"tag", required_argument, 0, O_TAG},
        {"max-shard-size", required_argument, 0, O_SHARD},
        {"dtype", required_argument, 0, O_DTYPE},
        {"verify", no_argument, 0, O_VERIFY},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0}};
    ds_z2f_opts o;
    ds_z2f_opts_defaults(&o);
    bool verify = false, shard_given = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", k_long, NULL)) != -1) {
        switch (c) {
        case O_TAG: o.tag = optarg; break;
        case O_SHARD:
            if (ds_st_parse_size(optarg, &o.max_shard_bytes) != DS_OK || o.max_shard_bytes == 0)
                return usage_error("--max-shard-size: not a size: ", optarg);
            shard_given = true;
            break;
        case O_DTYPE:
            if (!strcmp(optarg, "fp32")) o.dtype = DS_F32;
            else if (!strcmp(optarg, "fp16")) o.dtype = DS_F16;
            else if (!strcmp(optarg, "bf16")) o.dtype = DS_BF16;
            else return usage_error("--dtype must be fp32, fp16 or bf16, got ", optarg);
            break;
        case O_VERIFY: verify = true; break;
        case O_HELP: fputs(k_usage, stdout); return 0;
        default: return usage_error("unknown or incomplete option ", argv[optind - 1]);
        }
    }
    int npos = argc - optind;
    if (verify) {
        if (npos != 1) return usage_error("--verify takes one CKPT_DIR", NULL);
        const char *dir = argv[optind];
        char tag[256];
        if (!o.tag) {
            if (ds_checkpoint_latest(dir, tag, sizeof tag) != DS_OK) return failed("verify");
            o.tag = tag;
        }
        double t0 = now_s();
        if (ds_checkpoint_verify(dir, o.tag) != DS_OK) return failed("verify");
        printf("zero_to_fp32: %s/%s is complete and every checksum matches (%.2f s)\n", dir,
               o.tag, now_s() - t0);
        return 0;
    }
    if (npos != 2) return usage_error("expected CKPT_DIR and OUT", NULL);
    const char *dir = argv[optind], *out = argv[optind + 1];
    size_t n = strlen(out);
    if (shard_given && n >= 12 && !strcmp(out + n - 12, ".safetensors"))
        return usage_error("--max-shard-size needs a folder OUT, not the file ", out);
    ds_z2f_report rep;
    double t0 = now_s();
    if (ds_zero_to_fp32(dir, out, &o, &rep) != DS_OK) return failed("converting");
    double dt = now_s() - t0;
    printf("zero_to_fp32: %s/%s -> %s: %d tensors, %lld parameters, %.1f MB in %d file(s), "
           "%.2f s (%.0f MB/s)\n", dir, rep.tag, out, rep.n_tensors, (long long)rep.n_elements,
           (double)rep.bytes_written / 1e6, rep.n_files, dt,
           dt > 0 ? (double)rep.bytes_written / 1e6 / dt : 0.0);
    return 0;
}
