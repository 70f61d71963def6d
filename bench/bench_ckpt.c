/* Checkpoint throughput: save and load per rank, the size ratio zstd gives
 * per section and codec, and zero_to_fp32 against `cat` of the same files.
 *
 *   mpirun -np 2 build/bench/bench_ckpt --save-load DIR [--vocab 1000] [--embed 8192]
 *       [--hidden 8192] [--layers 4] [--stage 2] [--steps 2]
 *       an MLP (the defaults: 277M parameters, 1.11 GB of fp32 weights, 3.3 GB
 *       with the two Adam moments, almost all in dense layers, so every
 *       moment is non-zero after a step; --vocab 1200000 --embed 256
 *       --layers 1 --hidden 32 gives instead a 307M embedding whose unused
 *       rows keep zero moments) trained `steps` steps, saved to DIR (timed),
 *       loaded back into a fresh engine (timed), then on rank 0 a codec sweep
 *       over 64 MiB of each section read back from its shard file
 *   build/bench/bench_ckpt --convert DIR OUT
 *       one process, no MPI: `cat` of every shard file to /dev/null (once to
 *       warm the page cache, then timed), `cat | dd conv=fsync` of the same
 *       files into OUT.cat (a copy onto the output's disk, then removed),
 *       then ds_zero_to_fp32(DIR, OUT) (timed) and the process's peak RSS
 *       (getrusage) before and after
 *
 * MB = 1e6 bytes. Save / load rates are fp32 bytes of state per rank per
 * second (what the rank moved between the engine and the files), measured
 * between barriers, so the slowest rank sets the time. The files are read
 * back from the page cache when loading right after saving (the machine's
 * RAM holds them); the save includes fsync of every file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "engine/engine.h"
#include "models/models.h"
#include "engine/io/ckpt_file.h"

static double mb(uint64_t b) { return (double)b / 1e6; }

static void die(const char *what) {
    fprintf(stderr, "bench_ckpt: %s: %s\n", what, ds_last_error());
    exit(1);
}

static long peak_rss_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static ds_dataset *make_data(int vocab, int T, size_t n) {
    const char *names[2] = {"a", "b"};
    ds_dataset *d;
    if (ds_cls_dataset_create(n, T, 2, names, &d) != DS_OK) return NULL;
    int32_t *ids = ds_dataset_i32(d, "input_ids"), *labels = ds_dataset_i32(d, "labels");
    float *mask = ds_dataset_f32(d, "attention_mask");
    unsigned s = 99;
    for (size_t i = 0; i < n; i++) {
        for (int t = 0; t < T; t++) {
            s = s * 1103515245u + 12345u;
            ids[i * (size_t)T + (size_t)t] = (int)((s >> 8) % (unsigned)vocab);
            mask[i * (size_t)T + (size_t)t] = 1.0f;
        }
        labels[i] = (int)(i % 2);
    }
    return d;
}

/* Rank 0: 64 MiB (or less) of each section of shard 0 rewritten with each
 * codec; stored size / raw size and compression speed. */
static void codec_sweep(const char *dir, int world) {
    char tag[256], path[4400];
    if (ds_checkpoint_latest(dir, tag, sizeof tag) != DS_OK) die("latest");
    snprintf(path, sizeof path, "%s/%s/shard-00000-of-%05d.dsck", dir, tag, world);
    ds_ckpt_reader *r;
    if (ds_ckpt_reader_open(path, &r) != DS_OK) die("open shard 0");
    printf("\nzstd on the saved state (shard 0, up to 64 MiB of each section; ratio = stored / "
           "raw):\n");
    printf("| section | as saved | lvl 1 | lvl 1 + shuffle | lvl 3 + shuffle | lvl -3 + shuffle "
           "| MB/s: lvl 1 | lvl 1 + shuffle | lvl 3 + shuffle | lvl -3 + shuffle |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    const size_t cap = 16u << 20; /* values */
    float *buf = malloc(cap * sizeof *buf);
    for (uint32_t sec = 0; sec < DS_CKPT_SECTION_COUNT; sec++) {
        int64_t lo, hi;
        if (!ds_ckpt_reader_section(r, sec, &lo, &hi)) continue;
        double as_saved = (double)ds_ckpt_reader_section_stored(r, sec) / ((double)(hi - lo) * 4);
        size_t n = (size_t)(hi - lo) < cap ? (size_t)(hi - lo) : cap;
        if (ds_ckpt_read(r, sec, lo, lo + (int64_t)n, buf) != DS_OK) die("read back");
        struct {
            int level;
            ds_ckpt_filter f;
        } codecs[4] = {{1, DS_CKPT_FILTER_NONE}, {1, DS_CKPT_FILTER_SHUFFLE},
                       {3, DS_CKPT_FILTER_SHUFFLE}, {-3, DS_CKPT_FILTER_SHUFFLE}};
        double ratio[4], rate[4];
        for (int c = 0; c < 4; c++) {
            char tmp[4500];
            snprintf(tmp, sizeof tmp, "%s/codec_sweep.dsck", dir);
            ds_ckpt_write_opts o;
            ds_ckpt_write_opts_defaults(&o);
            o.level = codecs[c].level;
            o.filter = codecs[c].f;
            ds_ckpt_header h = {.rank = 0, .world = 1, .lo = 0, .hi = (int64_t)n};
            ds_ckpt_writer *w;
            ds_ckpt_file_info info;
            double t0 = now_s();
            if (ds_ckpt_writer_open(tmp, &h, &o, &w) != DS_OK ||
                ds_ckpt_writer_begin(w, 0, 0, (int64_t)n) != DS_OK ||
                ds_ckpt_writer_append(w, buf, n) != DS_OK || ds_ckpt_writer_end(w) != DS_OK ||
                ds_ckpt_writer_finish(w, &info) != DS_OK)
                die("codec sweep");
            rate[c] = mb(n * 4) / (now_s() - t0);
            ratio[c] = (double)info.file_bytes / ((double)n * 4);
            unlink(tmp);
        }
        printf("| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.0f | %.0f | %.0f | %.0f |\n",
               ds_ckpt_section_name(sec), as_saved, ratio[0], ratio[1], ratio[2], ratio[3],
               rate[0], rate[1], rate[2], rate[3]);
    }
    free(buf);
    ds_ckpt_reader_close(r);
}

static int save_load(const char *dir, int vocab, int embed, int hidden, int layers, int stage,
                     int steps) {
    const int T = 16;
    ds_dataset *data = make_data(vocab, T, 512);
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"train_micro_batch_size_per_gpu\": 8, \"gradient_accumulation_steps\": 1,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}},"
             " \"steps_per_print\": 1000, \"zero_optimization\": {\"stage\": %d,"
             " \"reduce_bucket_size\": 50000000}}", stage);
    double t_save = 0;
    engine_t *e[2];
    double t_init = now_s();
    /* one engine at a time: the saving one is finalized before the loading
     * one is built, so the bench needs one model's memory */
    for (int k = 0; k < 2; k++) {
        ds_model *model;
        ds_mlp_desc md = {.vocab_size = vocab, .max_seq_len = T, .embed_dim = embed,
                          .hidden_dim = hidden, .n_hidden = layers, .n_classes = 2};
        if (ds_mlp_create(&md, &model) != DS_OK) die("model");
        ds_init_desc d;
        ds_init_desc_defaults(&d);
        d.config_json = cfg;
        d.model = model;
        d.train_data = data;
        d.quiet = true;
        if (ds_initialize(&d, &e[k]) != DS_OK) die("initialize");
        if (k == 1) break;
        int rank0 = ds_rank(e[0]);
        int64_t psi0 = ds_model_num_params(ds_get_model(e[0]));
        if (rank0 == 0)
            printf("bench_ckpt: MLP, %d x %d embedding, %d hidden layer(s) of %d: %lld parameters "
                   "(%.0f MB fp32), %d rank(s), ZeRO stage %d, AdamW; built in %.1f s\n", vocab,
                   embed, layers, hidden,
                   (long long)psi0, mb((uint64_t)psi0 * 4), ds_world_size(e[0]), stage,
                   now_s() - t_init);
        for (int s = 0; s < steps; s++)
            if (ds_train_batch(e[0], NULL) != DS_OK) die("train");
        ds_all_reduce_host(e[0], &(int64_t){0}, 1, DS_I64); /* barrier */
        double t0 = now_s();
        if (ds_save_checkpoint(e[0], dir, NULL, NULL) != DS_OK) die("save");
        t_save = now_s() - t0;
        ds_finalize(e[0]);
    }
    int rank = ds_rank(e[1]), world = ds_world_size(e[1]);
    int64_t psi = ds_model_num_params(ds_get_model(e[1]));
    /* state per rank: its partition of weights + 2 moments */
    uint64_t raw_rank = 3ull * 4ull * (uint64_t)((psi + world - 1) / world);
    ds_all_reduce_host(e[1], &(int64_t){0}, 1, DS_I64);
    ds_ckpt_io_stats_reset();
    double t0 = now_s();
    if (ds_load_checkpoint(e[1], dir, NULL, DS_LOAD_ALL) != DS_OK) die("load");
    double t_load = now_s() - t0;
    ds_ckpt_io_stats io;
    ds_ckpt_io_stats_get(&io);

    if (rank == 0) {
        char tag[256], path[4400];
        ds_checkpoint_latest(dir, tag, sizeof tag);
        uint64_t stored = 0, raw_total = 0;
        for (int r = 0; r < world; r++) {
            snprintf(path, sizeof path, "%s/%s/shard-%05d-of-%05d.dsck", dir, tag, r, world);
            ds_ckpt_reader *rd;
            if (ds_ckpt_reader_open(path, &rd) != DS_OK) die("reopen");
            ds_ckpt_file_info info;
            ds_ckpt_reader_info(rd, &info);
            stored += info.file_bytes;
            raw_total += info.raw_bytes;
            ds_ckpt_reader_close(rd);
        }
        printf("\n| ranks | stage | fp32 state per rank | save | save per rank | load | load per "
               "rank | on disk / raw |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        printf("| %d | %d | %.0f MB | %.2f s | %.0f MB/s | %.2f s | %.0f MB/s | %.0f / %.0f MB = "
               "%.3f |\n", world, stage, mb(raw_rank), t_save, mb(raw_rank) / t_save, t_load,
               mb(raw_rank) / t_load, mb(stored), mb(raw_total),
               (double)stored / (double)raw_total);
        printf("(load: rank 0 decompressed %.0f MB in %llu frames and verified %llu frames)\n",
               mb(io.raw_decoded), (unsigned long long)io.frames_decoded,
               (unsigned long long)io.frames_verified);
        codec_sweep(dir, world);
    }
    ds_finalize(e[1]);
    ds_dataset_destroy(data);
    return 0;
}

static int convert(const char *dir, const char *out) {
    char tag[256], cmd[9000];
    if (ds_checkpoint_latest(dir, tag, sizeof tag) != DS_OK) die("latest");
    snprintf(cmd, sizeof cmd, "cat '%s/%s'/shard-*.dsck > /dev/null", dir, tag);
    if (system(cmd) != 0) die("cat (warm-up)");
    double t0 = now_s();
    if (system(cmd) != 0) die("cat");
    double t_cat = now_s() - t0;
    /* the same bytes through the page cache into a file on the output's
     * disk, fsynced: what a copy costs where the converter writes */
    snprintf(cmd, sizeof cmd, "cat '%s/%s'/shard-*.dsck | dd of='%s.cat' bs=4M conv=fsync "
             "status=none && rm -f '%s.cat'", dir, tag, out, out);
    t0 = now_s();
    if (system(cmd) != 0) die("cat | dd");
    double t_copy = now_s() - t0;
    snprintf(cmd, sizeof cmd, "du -cb '%s/%s'/shard-*.dsck | tail -1", dir, tag);
    FILE *p = popen(cmd, "r");
    unsigned long long files = 0;
    if (!p || fscanf(p, "%llu", &files) != 1) die("du");
    pclose(p);
    long rss0 = peak_rss_kib();
    ds_z2f_opts o;
    ds_z2f_opts_defaults(&o);
    ds_z2f_report rep;
    t0 = now_s();
    if (ds_zero_to_fp32(dir, out, &o, &rep) != DS_OK) die("zero_to_fp32");
    double t_conv = now_s() - t0;
    long rss1 = peak_rss_kib();
    printf("| shard files | cat > /dev/null | cat > file + fsync | zero_to_fp32 | read by it | "
           "written (fp32) | peak RSS before / after |\n"
           "| --- | --- | --- | --- | --- | --- | --- |\n");
    printf("| %.0f MB | %.2f s, %.0f MB/s | %.2f s, %.0f MB/s | %.2f s, %.0f MB/s out | %.0f MB | "
           "%.0f MB in %d file(s) | %.1f / %.1f MiB |\n", mb(files), t_cat, mb(files) / t_cat,
           t_copy, mb(files) / t_copy, t_conv, mb(rep.bytes_written) / t_conv,
           mb(rep.bytes_read), mb(rep.bytes_written), rep.n_files, rss0 / 1024.0,
           rss1 / 1024.0);
    return 0;
}

int main(int argc, char **argv) {
    const char *save_dir = NULL, *conv_dir = NULL, *out = NULL;
    int vocab = 1000, embed = 8192, hidden = 8192, layers = 4, stage = 2, steps = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--save-load") && i + 1 < argc) save_dir = argv[++i];
        else if (!strcmp(argv[i], "--convert") && i + 2 < argc) {
            conv_dir = argv[++i];
            out = argv[++i];
        } else if (!strcmp(argv[i], "--vocab") && i + 1 < argc) vocab = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--embed") && i + 1 < argc) embed = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) hidden = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--stage") && i + 1 < argc) stage = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_ckpt --save-load DIR [--vocab V] [--embed D] "
                    "[--hidden H] [--layers L] [--stage S] [--steps N] | --convert DIR OUT\n");
            return 2;
        }
    }
    if (save_dir) return save_load(save_dir, vocab, embed, hidden, layers, stage, steps);
    if (conv_dir) return convert(conv_dir, out);
    fprintf(stderr, "bench_ckpt: give --save-load DIR or --convert DIR OUT\n");
    return 2;
}
