/* zero_estimate: per-rank device, host and disk bytes of a training
 * configuration before running it (zero/estimate.h), as DeepSpeed's
 * estimate_zero2_model_states_mem_needs_all_live / ..._zero3_... print
 * them, but from this engine's own allocations.
 *
 *   zero_estimate --params 2013282308 --largest-layer 67117056 --stage 1 --precision bf16
 *   zero_estimate --model-config config.json --ranks 4 --stage 3 \
 *                 --offload-optimizer nvme --offload-param cpu
 *
 * Prints the chosen configuration by purpose and place, then every offload
 * option of the stage (DeepSpeed's "per CPU | per GPU | Options" table),
 * each against this host's RAM (MemAvailable, a memory cgroup's headroom
 * when less, or DS_MEM_LIMIT; the line says which). Exit
 * status 0, or 2 with one line on stderr for bad arguments. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "hf/hf.h"
#include "models/models.h"
#include "zero/estimate.h"

static const char k_usage[] =
    "usage: zero_estimate (--params N [--largest-layer L] | --model-config FILE)\n"
    "                     [--ranks R] [--ranks-per-host K] [--stage 0..3]\n"
    "                     [--offload-optimizer none|cpu|nvme] [--offload-param none|cpu|nvme]\n"
    "                     [--precision fp32|fp16|bf16] [--backend cpu|cuda]\n"
    "                     [--micro-batch B] [--config ds_config.json]\n"
    "Per-rank bytes of the model states, buffers and (with --model-config) activations\n"
    "of a configuration, by purpose and place (device, host RAM, NVMe files).\n"
    "  --params N           parameters (Psi), up to 1e15; --largest-layer L: those of\n"
    "                       the largest layer (sizes buffers; needed at stage 3, as\n"
    "                       DeepSpeed's zero3 estimator's largest_layer_params; 0 or\n"
    "                       absent below stage 3: not counted)\n"
    "  --model-config FILE  a Hugging Face GPT-2 or BERT config.json: the exact layout\n"
    "  --ranks R            ranks in all (default 1); --ranks-per-host K (default R, at\n"
    "                       most R; the RAM is judged for a host of K ranks, where R\n"
    "                       is not a multiple of K the last host has fewer)\n"
    "  --config FILE        a ds_config.json; the flags override its keys\n"
    "  --micro-batch B      train_micro_batch_size_per_gpu for the activations (default 1)\n"
    "Counts are whole numbers, written 2000000000, 2e9 or 1.5e9.\n"
    "Defaults: stage 2, fp32, no offload, the cpu backend.\n";

typedef struct opts {
    long long params, largest;
    const char *model_config, *config, *precision, *opt, *param, *backend;
    int ranks, per_host, stage, micro;
    bool largest_set; /* --largest-layer given (0 included) */
} opts;

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "zero_estimate: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (zero_estimate --help)\n");
    return 2;
}

/* The most parameters the tool takes: 1e15, a thousand times the largest
 * models trained, far below where the byte counts (up to ~40 per
 * parameter, times the ranks of a host) leave 64 bits. */
#define MAX_PARAMS 1000000000000000LL

/* A whole number from lo to hi (hi <= 2^53, so the double is exact):
 * decimal digits with an optional fraction and exponent, so 2e9, 1.5e9 and
 * 2000000000 all read, but not NaN, inf, a sign, hexadecimal or a value
 * with a fraction left (2.5 ranks are not 2). */
static bool parse_count(const char *s, long long lo, long long hi, long long *out) {
    const char *end;
    double v;
    if (!ds_estimate_parse_decimal(s, &v, &end) || *end || v != floor(v) || v < (double)lo ||
        v > (double)hi)
        return false;
    *out = (long long)v;
    return true;
}

/* parse_count or the usage error naming the option and its range. */
#define COUNT(opt, lo, hi, dst)                                                                  \
    do {                                                                                         \
        long long v_;                                                                            \
        if (!parse_count(optarg, (lo), (hi), &v_)) {                                             \
            fprintf(stderr, "zero_estimate: %s: must be a whole number from %lld to %lld, got "  \
                    "'%s' (zero_estimate --help)\n", (opt), (long long)(lo), (long long)(hi),    \
                    optarg);                                                                     \
            return 2;                                                                            \
        }                                                                                        \
        (dst) = v_;                                                                              \
    } while (0)

static bool one_of(const char *s, const char *a, const char *b, const char *c) {
    return !strcmp(s, a) || !strcmp(s, b) || !strcmp(s, c);
}

static int parse(int argc, char **argv, opts *o) {
    static const struct option lo[] = {
        {"params", required_argument, 0, 'p'},        {"largest-layer", required_argument, 0, 'l'},
        {"model-config", required_argument, 0, 'm'}, {"ranks", required_argument, 0, 'r'},
        {"ranks-per-host", required_argument, 0, 'k'}, {"stage", required_argument, 0, 's'},
        {"offload-optimizer", required_argument, 0, 'o'},
        {"offload-param", required_argument, 0, 'q'}, {"precision", required_argument, 0, 'x'},
        {"backend", required_argument, 0, 'b'},       {"micro-batch", required_argument, 0, 'B'},
        {"config", required_argument, 0, 'c'},        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    *o = (opts){.params = -1, .ranks = 1, .stage = -1, .micro = 0};
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'p': COUNT("--params", 1, MAX_PARAMS, o->params); break;
        case 'l': COUNT("--largest-layer", 0, MAX_PARAMS, o->largest);
                  o->largest_set = true;
                  break;
        case 'm': o->model_config = optarg; break;
        case 'c': o->config = optarg; break;
        case 'r': COUNT("--ranks", 1, 1000000, o->ranks); break;
        case 'k': COUNT("--ranks-per-host", 1, 100000, o->per_host); break;
        case 's': COUNT("--stage", 0, 3, o->stage); break;
        case 'B': COUNT("--micro-batch", 1, 1000000, o->micro); break;
        case 'o': case 'q':
            if (!one_of(optarg, "none", "cpu", "nvme"))
                return usage_error(ch == 'o' ? "--offload-optimizer: none, cpu or nvme, got '%s'"
                                             : "--offload-param: none, cpu or nvme, got '%s'",
                                   optarg);
            *(ch == 'o' ? &o->opt : &o->param) = optarg;
            break;
        case 'x': if (!one_of(optarg, "fp32", "fp16", "bf16"))
                      return usage_error("--precision: fp32, fp16 or bf16, got '%s'", optarg);
                  o->precision = optarg;
                  break;
        case 'b': if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
                      return usage_error("--backend: cpu or cuda, got '%s'", optarg);
                  o->backend = optarg;
                  break;
        case 'h': fputs(k_usage, stdout); exit(0);
        default:
            return usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if ((o->params > 0) == (o->model_config != NULL))
        return usage_error("%sgive --params N or --model-config FILE, one of them", "");
    if (o->model_config && o->largest)
        return usage_error("%s--largest-layer goes with --params (a model config has its layers)", "");
    if (o->largest > o->params && o->params > 0)
        return usage_error("%s--largest-layer is larger than --params", "");
    if (!o->per_host) o->per_host = o->ranks;
    if (o->per_host > o->ranks) {
        fprintf(stderr, "zero_estimate: --ranks-per-host %d is more than --ranks %d: a host "
                "holds at most all the ranks (zero_estimate --help)\n", o->per_host, o->ranks);
        return 2;
    }
    return 0;
}

static ds_offload_device device_of(const char *s) {
    return !strcmp(s, "cpu") ? DS_OFFLOAD_CPU : !strcmp(s, "nvme") ? DS_OFFLOAD_NVME
                                                                   : DS_OFFLOAD_NONE;
}

/* The config: the file's, or DeepSpeed's defaults (stage 2 here, as the
 * usual starting point), then the flags. Its "auto" keys resolve as under
 * Hugging Face's Trainer with its defaults (a template such as
 * configs/hf_zero2.json estimates as it would train), the bucket sizes from
 * the model's hidden size when --model-config gives one. */
static ds_status make_config(const opts *o, int hidden, ds_config *c) {
    if (o->config) DS_TRY(ds_config_parse_file(o->config, c, NULL, NULL));
    else DS_TRY(ds_config_parse_string("{\"train_micro_batch_size_per_gpu\": 1, "
                                       "\"zero_optimization\": {\"stage\": 2}}", c, NULL, NULL));
    /* the flags before resolving, so the resolver's own checks (offload
     * against stage, ...) judge what is estimated */
    if (o->micro) c->train_micro_batch_size_per_gpu = o->micro;
    if (o->stage >= 0) c->zero_stage = o->stage;
    if (o->precision) {
        c->fp16_enabled = !strcmp(o->precision, "fp16");
        c->bf16_enabled = !strcmp(o->precision, "bf16");
    }
    if (o->opt) c->offload_optimizer.device = device_of(o->opt);
    if (o->param) c->offload_param.device = device_of(o->param);
    /* an estimate writes no file: --offload-* nvme without a config's
     * nvme_path (DeepSpeed's default None) names none */
    ds_offload_config *offs[2] = {&c->offload_optimizer, &c->offload_param};
    for (int k = 0; k < 2; k++)
        if (offs[k]->device == DS_OFFLOAD_NVME && !offs[k]->nvme_path[0])
            snprintf(offs[k]->nvme_path, sizeof offs[k]->nvme_path, "(estimate)");
    ds_config_hints h;
    ds_config_hints_hf_defaults(&h);
    h.lr_scheduler_type = NULL; /* a schedule changes no byte: none is filled in */
    h.world_size = o->ranks;
    h.hidden_size = hidden;
    if (o->micro) h.micro_batch = o->micro;
    if (o->precision) { /* "auto" precision keys take the flag too */
        h.fp16 = c->fp16_enabled;
        h.bf16 = c->bf16_enabled;
    }
    DS_TRY(ds_config_resolve(c, &h));
    return DS_OK;
}

static ds_status make_model(const char *path, ds_model **out) {
    ds_gpt2_desc gd;
    if (ds_hf_gpt2_config_read(path, &gd) == DS_OK) return ds_gpt2_create(&gd, out);
    char gpt2_err[512];
    snprintf(gpt2_err, sizeof gpt2_err, "%s", ds_last_error());
    ds_clear_error();
    ds_bert_desc bd;
    if (ds_hf_bert_config_read(path, 0, &bd) == DS_OK) return ds_bert_create(&bd, out);
    char bert_err[512];
    snprintf(bert_err, sizeof bert_err, "%s", ds_last_error());
    return DS_ERR(DS_ERR_CONFIG, "--model-config %s: neither a GPT-2 nor a BERT config "
                  "(as GPT-2: %s; as BERT: %s)", path, gpt2_err, bert_err);
}

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

/* The table's unit: GiB, or MiB for a model whose every place is under 1 GiB. */
static double g_unit = 1024.0 * 1024.0 * 1024.0;
static const char *g_unit_name = "GiB";
static double u(uint64_t b) { return (double)b / g_unit; }

static ds_status estimate(const opts *o, const ds_model *m, const ds_config *c, ds_backend_kind be,
                          ds_mem_report *r) {
    if (m) DS_TRY(ds_estimate_model(m, o->ranks, c, be, r));
    else DS_TRY(ds_estimate_params(o->params, o->largest, o->ranks, c, be, r));
    return DS_OK;
}

static ds_status run(const opts *o) {
    /* the limit first: a DS_MEM_LIMIT that is not a size is a bad argument
     * (exit 2, nothing printed); an unreadable /proc/meminfo only leaves the
     * fit unjudged */
    uint64_t limit = 0;
    const char *source = "";
    ds_status lst = ds_estimate_ram_limit(&limit, &source);
    if (lst == DS_ERR_INVALID_ARG) return lst;
    if (lst != DS_OK) {
        fprintf(stderr, "zero_estimate: warning: %s\n", ds_last_error());
        ds_clear_error();
    }
    ds_model *m = NULL;
    if (o->model_config) DS_TRY(make_model(o->model_config, &m));
    ds_config c;
    ds_status cs = make_config(o, m ? m->hidden_size : 0, &c);
    if (cs != DS_OK) {
        ds_model_destroy(m);
        return cs;
    }
    /* stage 3 gathers whole layers into slots sized by the largest: from a
     * count alone they are unknown, and leaving them out silently made a
     * 124M-parameter model's buffers a third of what it allocates.
     * DeepSpeed's estimate_zero3_model_states_mem_needs_all_live takes
     * largest_layer_params as an argument too; 0, given, is a choice. */
    if (!m && c.zero_stage == 3 && !o->largest_set)
        return DS_ERR(DS_ERR_INVALID_ARG,
                      "--stage 3 needs --largest-layer L, the parameters of the largest layer "
                      "(stage 3's gather slots are sized by it, as DeepSpeed's "
                      "estimate_zero3_model_states_mem_needs_all_live's largest_layer_params); "
                      "--largest-layer 0 estimates without those buffers");
    ds_backend_kind be = o->backend && !strcmp(o->backend, "cuda") ? DS_BACKEND_CUDA
                                                                   : DS_BACKEND_CPU;
    ds_mem_report r;
    ds_status st = estimate(o, m, &c, be, &r);
    if (st != DS_OK) {
        ds_model_destroy(m);
        return st;
    }
    int64_t psi = m ? ds_model_num_params(m) : o->params;
    const char *prec = c.fp16_enabled ? "fp16" : c.bf16_enabled ? "bf16" : "fp32";
    /* ranks not a multiple of the hosts' share: the last host holds the
     * rest, and the fit below is judged for a full one (the most) */
    char hosts[96] = "";
    if (o->ranks % o->per_host)
        snprintf(hosts, sizeof hosts, "; the last of %d hosts has %d",
                 (o->ranks + o->per_host - 1) / o->per_host, o->ranks % o->per_host);
    printf("Estimated memory per rank: %lld parameters (%.1fM)%s, %d rank%s (%d per host%s), "
           "ZeRO stage %d, %s, %s backend,\noffload_optimizer %s, offload_param %s\n",
           (long long)psi, psi / 1e6, m ? "" : o->largest ? ", layout from --params" :
           ", layout from --params, no largest layer (buffers sized by it left out)",
           o->ranks, o->ranks == 1 ? "" : "s", o->per_host, hosts, c.zero_stage, prec,
           be == DS_BACKEND_CPU ? "cpu" : "cuda", ds_offload_device_name(c.offload_optimizer.device),
           ds_offload_device_name(c.zero_stage == 3 ? c.offload_param.device : DS_OFFLOAD_NONE));
    if (r.total[DS_PLACE_DEVICE] < (1u << 30) && r.total[DS_PLACE_HOST] < (1u << 30) &&
        r.total[DS_PLACE_NVME] < (1u << 30)) {
        g_unit = 1024.0 * 1024.0;
        g_unit_name = "MiB";
    }
    printf("  %-12s %12s %12s %12s   (%s)\n", "purpose", "device", "host", "nvme", g_unit_name);
    for (int p = 0; p < DS_MEM_PURPOSE_COUNT; p++)
        printf("  %-12s %12.3f %12.3f %12.3f\n", ds_mem_purpose_name((ds_mem_purpose)p),
               u(r.bytes[p][DS_PLACE_DEVICE]), u(r.bytes[p][DS_PLACE_HOST]),
               u(r.bytes[p][DS_PLACE_NVME]));
    printf("  %-12s %12.3f %12.3f %12.3f\n", "total", u(r.total[DS_PLACE_DEVICE]),
           u(r.total[DS_PLACE_HOST]), u(r.total[DS_PLACE_NVME]));
    uint64_t need = ds_estimate_ram_ranks(&r, be, o->per_host);
    printf("RAM of this host for its %d rank%s: %.3f GiB%s", o->per_host,
           o->per_host == 1 ? "" : "s", gib(need),
           be == DS_BACKEND_CPU ? " (the cpu backend's device memory is RAM)" : "");
    if (limit) printf("; available %.3f GiB (%s): %s", gib(limit), source,
                      need <= limit ? "fits" : "does NOT fit");
    printf("\n");
    if (limit && need > limit) {
        char fix[512];
        ds_estimate_fix(m, o->params, o->largest, o->ranks, o->per_host, &c, be, limit, fix,
                        sizeof fix);
        printf("fix: %s\n", fix);
    }
    /* every option of this stage, as DeepSpeed's _all_live tables */
    printf("\nAll options at stage %d (per rank, %s):\n  %9s %9s %9s   options\n",
           c.zero_stage < 1 ? 1 : c.zero_stage, g_unit_name, "device", "host", "nvme");
    for (int q = 0; q < (c.zero_stage == 3 ? 3 : 1); q++)
        for (int k = 0; k < 3; k++) {
            ds_config t = c;
            if (t.zero_stage == 0) t.zero_stage = 1;
            t.offload_optimizer.device = (ds_offload_device)k;
            t.offload_param.device = (ds_offload_device)q;
            ds_mem_report a;
            if (estimate(o, m, &t, be, &a) != DS_OK) {
                ds_clear_error();
                continue;
            }
            printf("  %9.3f %9.3f %9.3f   offload_optimizer=%s", u(a.total[DS_PLACE_DEVICE]),
                   u(a.total[DS_PLACE_HOST]), u(a.total[DS_PLACE_NVME]),
                   ds_offload_device_name(t.offload_optimizer.device));
            if (t.zero_stage == 3) printf(", offload_param=%s", ds_offload_device_name(t.offload_param.device));
            if (limit)
                printf("%s", ds_estimate_ram_ranks(&a, be, o->per_host) <= limit
                                 ? "" : "   (does not fit this host)");
            printf("\n");
        }
    ds_model_destroy(m);
    return DS_OK;
}

int main(int argc, char **argv) {
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    if (run(&o) != DS_OK) {
        fprintf(stderr, "zero_estimate: %s\n", ds_last_error());
        return 2;
    }
    return 0;
}
