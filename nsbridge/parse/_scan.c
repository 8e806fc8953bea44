/* nsbridge.parse._scan: one batch of trace events (a JSON array) straight into columns.

The msgspec reader builds a struct per event and then pulls each field out of a million
structs in Python; this scanner reads the JSON text once and writes the columns the
EVENTS frame needs directly: float64 numbers, and int32 codes into a per-batch table of
the distinct raw JSON texts of each string column (a name seen ten thousand times is one
entry). Python then turns each distinct raw text into its value once
(parse._event_columns.EventColumns.add_scanned).

The contract is narrow on purpose: scan() either gives exactly what the msgspec structs
(parse._stream.Event) would give for the batch, or declines (returns None) and the batch
is read by msgspec as before. It declines on anything it is not sure of: JSON that is not
strictly valid, a field whose type the structs would refuse, a phase outside X/i/s/f/M,
an escaped or repeated key it reads, a lone surrogate escape, bytes that are not UTF-8,
nesting deeper than 64 levels, and, in the fields it reads, an integer of more than 18
digits or a float that neither exact conversion handles (Clinger's fast path, or a
long-double candidate proved nearest with 128-bit integers: together they cover Kineto's
timestamps and durations). Declining is always safe; accepting is held to the msgspec
reader by tests on every fixture trace.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_INT_DIGITS 18

/* kinds of JSON value; ABSENT (0) is a field the event does not have */
enum { K_ABSENT = 0, K_NULL, K_STRING, K_INT, K_FLOAT, K_BOOL, K_OBJECT, K_ARRAY };

/* string columns, in the order scan() returns them (parse._event_columns.SCANNED_STRINGS) */
enum { S_CAT, S_NAME, S_PH, S_PID, S_TID, S_DIMS, S_TYPES, S_STRIDES, S_FILE, S_LAUNCH,
       N_STRINGS };
/* number columns (parse._event_columns.SCANNED_NUMBERS) */
enum { F_TS, F_DUR, F_EXT, F_CORR, F_BYTES, F_DEVICE, F_ALLOC, F_RESERVED, F_ADDR, N_NUMBERS };

typedef struct {
    const char *p; /* the value's JSON text */
    Py_ssize_t n;
    int kind;
    int escaped;   /* a string holding escapes */
    double num;    /* K_INT, K_FLOAT */
} Value;

typedef struct {
    Value ph, cat, name, pid, tid, ts, dur, args;
    Value ext, ext_lower, corr, dims, types, strides, nbytes, big_bytes, device, device_id, file,
        alloc, reserved, addr, grid, block, regs, smem;
} Event;

typedef struct {
    const unsigned char *p, *end;
} Cursor;

/* ---------------------------------------------------------------- growable arrays */

typedef struct {
    char *data;
    size_t len, cap;
} Buffer;

static int buffer_reserve(Buffer *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    char *data = realloc(b->data, cap);
    if (!data) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buffer_append(Buffer *b, const void *src, size_t n) {
    if (buffer_reserve(b, n)) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

/* ---------------------------------------------------------------- string interning */

typedef struct {
    Buffer keys;      /* the distinct texts, back to back */
    Buffer offsets;   /* size_t start of each distinct text in keys, plus the end */
    uint32_t *slots;  /* open addressing: 0 empty, else index + 1 */
    uint64_t *hashes; /* hash of each distinct text */
    size_t count, capacity, hashes_cap;
    Buffer codes;     /* int32 per row */
} Interner;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 32;
    return h * 0x9E3779B97F4A7C15ull;
}

static const char *interned_text(const Interner *t, size_t i, size_t *n) {
    const size_t *off = (const size_t *)t->offsets.data;
    *n = off[i + 1] - off[i];
    return t->keys.data + off[i];
}

static int interner_grow(Interner *t) {
    size_t capacity = t->capacity ? t->capacity * 2 : 1024;
    uint32_t *slots = calloc(capacity, sizeof(uint32_t));
    if (!slots) return -1;
    for (size_t i = 0; i < t->count; i++) {
        size_t at = t->hashes[i] & (capacity - 1);
        while (slots[at]) at = (at + 1) & (capacity - 1);
        slots[at] = (uint32_t)(i + 1);
    }
    free(t->slots);
    t->slots = slots;
    t->capacity = capacity;
    return 0;
}

/* the code of a text (a new one gets the next code); -1 on memory failure */
static int32_t intern(Interner *t, const char *s, size_t n) {
    if (t->count >= INT32_MAX) return -1;   /* codes are int32 */
    if ((t->count + 1) * 2 > t->capacity && interner_grow(t)) return -1;
    uint64_t h = hash_bytes(s, n);
    size_t at = h & (t->capacity - 1);
    while (t->slots[at]) {
        size_t i = t->slots[at] - 1, len;
        if (t->hashes[i] == h) {
            const char *text = interned_text(t, i, &len);
            if (len == n && memcmp(text, s, n) == 0) return (int32_t)i;
        }
        at = (at + 1) & (t->capacity - 1);
    }
    if (t->count == 0) {
        size_t zero = 0;
        if (buffer_append(&t->offsets, &zero, sizeof zero)) return -1;
    }
    if (t->count + 1 > t->hashes_cap) {
        size_t cap = t->hashes_cap ? t->hashes_cap * 2 : 1024;
        uint64_t *hashes = realloc(t->hashes, cap * sizeof(uint64_t));
        if (!hashes) return -1;
        t->hashes = hashes;
        t->hashes_cap = cap;
    }
    if (buffer_append(&t->keys, s, n)) return -1;
    size_t end = t->keys.len;
    if (buffer_append(&t->offsets, &end, sizeof end)) return -1;
    t->hashes[t->count] = h;
    t->slots[at] = (uint32_t)(t->count + 1);
    return (int32_t)t->count++;
}

static void interner_free(Interner *t) {
    free(t->keys.data);
    free(t->offsets.data);
    free(t->slots);
    free(t->hashes);
    free(t->codes.data);
}

/* ---------------------------------------------------------------- JSON validation */

static inline void skip_ws(Cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

static int hex4(const unsigned char *p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int ch = p[i], d;
        if (ch >= '0' && ch <= '9') d = ch - '0';
        else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
        else return -1;
        v = v * 16 + d;
    }
    return v;
}

/* strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF */
static int utf8_valid(const unsigned char *s, const unsigned char *end) {
    while (s < end) {
        unsigned char b = *s;
        if (b < 0x80) { s++; continue; }
        int n;
        uint32_t cp;
        if (b >= 0xC2 && b <= 0xDF) { n = 1; cp = b & 0x1F; }
        else if (b >= 0xE0 && b <= 0xEF) { n = 2; cp = b & 0x0F; }
        else if (b >= 0xF0 && b <= 0xF4) { n = 3; cp = b & 0x07; }
        else return 0;
        if (end - s <= n) return 0;
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i] & 0x3F);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)))
            || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        s += n + 1;
    }
    return 1;
}

#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* whether any of eight bytes is a quote, a backslash, a control character or not ASCII */
static inline int has_special_byte(uint64_t w) {
    uint64_t quote = w ^ (ONES * '"'), backslash = w ^ (ONES * '\\');
    uint64_t zero_in = ((quote - ONES) & ~quote) | ((backslash - ONES) & ~backslash);
    uint64_t control = (w - ONES * 0x20) & ~w;
    return ((zero_in | control) & HIGHS) != 0 || (w & HIGHS) != 0;
}

/* a string at c->p (its opening quote); 0 and past it, or -1 */
static int scan_string(Cursor *c, int *escaped) {
    const unsigned char *p = c->p + 1, *end = c->end;
    int esc = 0, high = 0;
    for (;;) {
        while (end - p >= 8) {   /* eight plain bytes at a time */
            uint64_t w;
            memcpy(&w, p, 8);
            if (has_special_byte(w)) break;
            p += 8;
        }
        while (p < end && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80) p++;
        if (p >= end) return -1;
        unsigned char ch = *p;
        if (ch == '"') break;
        if (ch < 0x20) return -1;
        if (ch >= 0x80) { high = 1; p++; continue; }
        esc = 1; /* a backslash */
        if (end - p < 2) return -1;
        ch = p[1];
        if (ch == 'u') {
            if (end - p < 6) return -1;
            int v = hex4(p + 2);
            if (v < 0) return -1;
            if (v >= 0xD800 && v <= 0xDFFF) {   /* a pair, or the batch is declined */
                if (v >= 0xDC00 || end - p < 12 || p[6] != '\\' || p[7] != 'u') return -1;
                int w = hex4(p + 8);
                if (w < 0xDC00 || w > 0xDFFF) return -1;
                p += 12;
            } else {
                p += 6;
            }
        } else if (ch == '"' || ch == '\\' || ch == '/' || ch == 'b' || ch == 'f' || ch == 'n'
                   || ch == 'r' || ch == 't') {
            p += 2;
        } else {
            return -1;
        }
    }
    if (high && !utf8_valid(c->p + 1, p)) return -1;
    *escaped = esc;
    c->p = p + 1;
    return 0;
}

/* m / 10^k correctly rounded for a mantissa of up to 19 digits (a Kineto timestamp in us
   has 16-19): a candidate from long double arithmetic, then proved nearest with exact
   128-bit integers. With x = m / 10^k and d = M * 2^E (M of 53 bits), d is the nearest
   double when |x - d| < 2^E / 2; scaled by 10^k * 2^-E (E <= 0) or by 10^k (E > 0), that
   is 2 |m * 2^-E - M * 10^k| < 10^k, or 2 |m - M * 10^k * 2^E| < 10^k * 2^E (equal: a
   tie, d when M is even). 0 when the proof fails or the numbers leave the 128-bit range:
   the caller declines. */
static int decimal_fast(uint64_t m, int k, double *out) {
    static const long double TEN[] = {1e0L,  1e1L,  1e2L,  1e3L,  1e4L,  1e5L,  1e6L,  1e7L,
                                      1e8L,  1e9L,  1e10L, 1e11L, 1e12L, 1e13L, 1e14L, 1e15L,
                                      1e16L, 1e17L, 1e18L, 1e19L, 1e20L, 1e21L, 1e22L};
    double d = (double)((long double)m / TEN[k]);
    if (!(d > 0.0) || !isfinite(d)) return 0;
    int e2;
    double fraction = frexp(d, &e2);                 /* d = fraction * 2^e2, 0.5 <= f < 1 */
    uint64_t M = (uint64_t)ldexp(fraction, 53);       /* d = M * 2^(e2 - 53), exact */
    int E = e2 - 53;
    if (E > 10 || E < -74 || M == (1ull << 52)) return 0;  /* out of range, or a power of
                                                              two (uneven gaps) */
    unsigned __int128 ten_k = 1;
    for (int i = 0; i < k; i++) ten_k *= 10;
    unsigned __int128 a, b, unit = ten_k;
    if (E > 0) {   /* a timestamp of 2^53 us or more: M * 10^k * 2^E < 2^(53 + 73 + 10) */
        if (k > 18) return 0;                        /* keeps it below 2^123 */
        a = m;
        b = ((unsigned __int128)M * ten_k) << E;
        unit = ten_k << E;
    } else {
        if (-E > 63 && (m >> (127 + E)) != 0) return 0;  /* m * 2^-E would overflow */
        a = (unsigned __int128)m << (-E);
        b = (unsigned __int128)M * ten_k;
    }
    unsigned __int128 gap = a > b ? a - b : b - a;
    if (gap >= ((unsigned __int128)1 << 126)) return 0;
    /* nearer than half a unit in the last place: d; exactly half (a Kineto timestamp
       ending in .125 or .5, say): d when its mantissa is even, as IEEE rounding ties */
    if (2 * gap > unit || (2 * gap == unit && (M & 1))) return 0;
    *out = d;
    return 1;
}

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                               1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                               1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* a number at c->p, checked against JSON's grammar: its kind (K_INT without fraction or
   exponent) and, when ``value`` is given, its value. -1 when the text is not a JSON number,
   or when a value is asked for and it is not certain to match msgspec's: an integer of
   more than MAX_INT_DIGITS digits, or a float neither exact path below can convert
   (more than 19 significant digits, or an exponent out of their range). */
static int scan_number(Cursor *c, int *kind, double *value) {
    const unsigned char *s = c->p, *p = s, *end = c->end;
    int negative = 0, digits = 0, inexact = 0, is_int = 1, huge = 0;
    long exp10 = 0;
    uint64_t mantissa = 0;
    if (p < end && *p == '-') { negative = 1; p++; }
    if (p >= end) return -1;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') {
            if (digits < 19) { mantissa = mantissa * 10 + (uint64_t)(*p - '0'); digits++; }
            else { inexact = 1; exp10++; }
            p++;
        }
    } else {
        return -1;
    }
    if (p < end && *p == '.') {
        is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') {
            int d = *p - '0';
            if (digits < 19) {   /* leading zeros of the fraction only move the exponent */
                if (mantissa || d) { mantissa = mantissa * 10 + (uint64_t)d; digits++; }
                exp10--;
            } else if (d) {
                inexact = 1;
            }
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        int negative_exp = 0;
        if (p < end && (*p == '+' || *p == '-')) { negative_exp = *p == '-'; p++; }
        if (p >= end || *p < '0' || *p > '9') return -1;
        long e = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (e < 100000) e = e * 10 + (*p - '0');
            else huge = 1;   /* the exponent is no longer exact */
            p++;
        }
        exp10 += negative_exp ? -e : e;
    }
    c->p = p;
    *kind = is_int ? K_INT : K_FLOAT;
    if (!value) return 0;
    if (huge) return -1;
    if (is_int) {
        if (inexact || digits > MAX_INT_DIGITS) return -1;
        int64_t v = (int64_t)mantissa;
        *value = (double)(negative ? -v : v);   /* -0 is the integer 0 */
        return 0;
    }
    if (mantissa == 0 && !inexact) {
        *value = negative ? -0.0 : 0.0;
        return 0;
    }
    if (!inexact && mantissa <= (1ull << 53) && exp10 >= -22 && exp10 <= 22) {
        /* both operands exact: one IEEE operation rounds correctly (Clinger's fast path) */
        double v = (double)mantissa;
        v = exp10 < 0 ? v / POW10[-exp10] : v * POW10[exp10];
        *value = negative ? -v : v;
        return 0;
    }
    if (!inexact && exp10 < 0 && exp10 >= -3 && mantissa > (1ull << 53)) {
        /* a Kineto timestamp (16 integer digits, a fraction of 1-3): whole + fraction, the
           whole exact (< 2^53), the fraction r / 10^k within 2^-53 of its value. The sum,
           at 2^43 or more, lies on a grid of doubles whose midpoints are multiples of
           2^-10 at the finest; r / 10^k is either one of them (exact as a double: the
           sum ties to even as a correct conversion does) or at least 1 / (1000 * 2^10)
           from every one, far beyond that error: one rounding gives the nearest double */
        uint64_t scale = exp10 == -1 ? 10 : exp10 == -2 ? 100 : 1000;
        uint64_t whole = mantissa / scale;
        if (whole < (1ull << 53)) {
            double v = (double)whole + (double)(mantissa % scale) / (double)scale;
            *value = negative ? -v : v;
            return 0;
        }
    }
    if (!inexact && exp10 < 0 && exp10 >= -22 && decimal_fast(mantissa, (int)-exp10, value)) {
        if (negative) *value = -*value;
        return 0;
    }
    return -1;   /* neither exact path applies: msgspec reads this batch (no strtod here:
                    it follows the C locale, and msgspec differs from it at huge exponents) */
}

static int skip_value(Cursor *c, int depth);

static int expect_literal(Cursor *c, const char *word, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return -1;
    c->p += n;
    return 0;
}

/* any JSON value at c->p, validated and passed over */
static int skip_value(Cursor *c, int depth) {
    if (c->p >= c->end) return -1;
    int escaped, kind;
    switch (*c->p) {
    case '"':
        return scan_string(c, &escaped);
    case '{':
    case '[': {
        int object = *c->p == '{';
        char close = object ? '}' : ']';
        if (depth >= MAX_DEPTH) return -1;
        c->p++;
        skip_ws(c);
        if (c->p < c->end && *c->p == close) { c->p++; return 0; }
        for (;;) {
            if (object) {
                if (c->p >= c->end || *c->p != '"' || scan_string(c, &escaped)) return -1;
                skip_ws(c);
                if (c->p >= c->end || *c->p != ':') return -1;
                c->p++;
                skip_ws(c);
            }
            if (skip_value(c, depth + 1)) return -1;
            skip_ws(c);
            if (c->p >= c->end) return -1;
            if (*c->p == ',') { c->p++; skip_ws(c); continue; }
            if (*c->p == close) { c->p++; return 0; }
            return -1;
        }
    }
    case 't': return expect_literal(c, "true", 4);
    case 'f': return expect_literal(c, "false", 5);
    case 'n': return expect_literal(c, "null", 4);
    default: return scan_number(c, &kind, NULL);
    }
}

/* a value the scanner keeps: its kind, text and (for numbers) value */
static int read_value(Cursor *c, Value *v, int depth) {
    if (v->kind != K_ABSENT) return -1;   /* a repeated key: declined */
    const unsigned char *start = c->p;
    if (c->p >= c->end) return -1;
    switch (*c->p) {
    case '"':
        if (scan_string(c, &v->escaped)) return -1;
        v->kind = K_STRING;
        break;
    case '{':
    case '[':
        if (skip_value(c, depth)) return -1;
        v->kind = *start == '{' ? K_OBJECT : K_ARRAY;
        break;
    case 't':
    case 'f':
        if (skip_value(c, depth)) return -1;
        v->kind = K_BOOL;
        break;
    case 'n':
        if (expect_literal(c, "null", 4)) return -1;
        v->kind = K_NULL;
        break;
    default:
        if (scan_number(c, &v->kind, &v->num)) return -1;
    }
    v->p = (const char *)start;
    v->n = (Py_ssize_t)(c->p - start);
    return 0;
}

#define KEY_IS(word) (n == sizeof(word) - 1 && memcmp(key, word, n) == 0)

/* the Value of an args key the analysis reads, or NULL */
static Value *args_field(Event *e, const char *key, size_t n) {
    switch (n) {
    case 4:
        if (KEY_IS("grid")) return &e->grid;
        if (KEY_IS("Addr")) return &e->addr;
        break;
    case 5:
        if (KEY_IS("bytes")) return &e->nbytes;
        if (KEY_IS("Bytes")) return &e->big_bytes;
        if (KEY_IS("block")) return &e->block;
        break;
    case 6: if (KEY_IS("device")) return &e->device; break;
    case 9: if (KEY_IS("Device Id")) return &e->device_id; break;
    case 10:
        if (KEY_IS("Input Dims")) return &e->dims;
        if (KEY_IS("Input type")) return &e->types;
        break;
    case 11:
        if (KEY_IS("External id")) return &e->ext;
        if (KEY_IS("external id")) return &e->ext_lower;
        if (KEY_IS("correlation")) return &e->corr;
        if (KEY_IS("kernel_file")) return &e->file;
        break;
    case 13:
        if (KEY_IS("shared memory")) return &e->smem;
        if (KEY_IS("Input Strides")) return &e->strides;
        break;
    case 14: if (KEY_IS("Total Reserved")) return &e->reserved; break;
    case 15: if (KEY_IS("Total Allocated")) return &e->alloc; break;
    case 20: if (KEY_IS("registers per thread")) return &e->regs; break;
    }
    return NULL;
}

/* the Value of an event key the analysis reads (args included), or NULL */
static Value *event_field(Event *e, const char *key, size_t n) {
    switch (n) {
    case 2:
        if (KEY_IS("ph")) return &e->ph;
        if (KEY_IS("ts")) return &e->ts;
        break;
    case 3:
        if (KEY_IS("cat")) return &e->cat;
        if (KEY_IS("pid")) return &e->pid;
        if (KEY_IS("tid")) return &e->tid;
        if (KEY_IS("dur")) return &e->dur;
        break;
    case 4:
        if (KEY_IS("name")) return &e->name;
        if (KEY_IS("args")) return &e->args;
        break;
    }
    return NULL;
}

/* an object's members; ``field`` picks the ones kept. An event's "args" object, when
   ``field`` names it, is read the same way with args_field. */
static int read_object(Cursor *c, Event *e, int depth,
                       Value *(*field)(Event *, const char *, size_t)) {
    c->p++; /* the brace */
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') { c->p++; return 0; }
    for (;;) {
        int escaped;
        if (c->p >= c->end || *c->p != '"') return -1;
        const char *key = (const char *)c->p + 1;
        if (scan_string(c, &escaped) || escaped) return -1;   /* an escaped key: declined */
        size_t n = (size_t)((const char *)c->p - key - 1);
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') return -1;
        c->p++;
        skip_ws(c);
        Value *v = field(e, key, n);
        if (v == &e->args && c->p < c->end && *c->p == '{') {
            if (e->args.kind != K_ABSENT || depth + 1 >= MAX_DEPTH) return -1;
            const unsigned char *start = c->p;
            if (read_object(c, e, depth + 1, args_field)) return -1;
            e->args.kind = K_OBJECT;
            e->args.p = (const char *)start;
        } else if (v) {
            if (read_value(c, v, depth + 1)) return -1;
        } else if (skip_value(c, depth + 1)) {
            return -1;
        }
        skip_ws(c);
        if (c->p >= c->end) return -1;
        if (*c->p == ',') { c->p++; skip_ws(c); continue; }
        if (*c->p == '}') { c->p++; return 0; }
        return -1;
    }
}

/* ---------------------------------------------------------------- columns */

typedef struct {
    Interner strings[N_STRINGS];
    Buffer numbers[N_NUMBERS];
    Buffer launch_key;
    Py_ssize_t rows;
} Columns;

static void columns_free(Columns *cols) {
    for (int i = 0; i < N_STRINGS; i++) interner_free(&cols->strings[i]);
    for (int i = 0; i < N_NUMBERS; i++) free(cols->numbers[i].data);
    free(cols->launch_key.data);
}

static int is_kind(const Value *v, int a, int b, int c) {
    return v->kind == K_ABSENT || v->kind == K_NULL || v->kind == a || v->kind == b || v->kind == c;
}

/* whether the msgspec structs would take this X or i event as it is */
static int fits_structs(const Event *e) {
    return is_kind(&e->cat, K_STRING, -1, -1) && is_kind(&e->name, K_STRING, -1, -1)
        && is_kind(&e->pid, K_INT, K_STRING, -1) && is_kind(&e->tid, K_INT, K_STRING, -1)
        && is_kind(&e->ts, K_INT, K_FLOAT, -1) && is_kind(&e->dur, K_INT, K_FLOAT, -1)
        && (e->args.kind == K_ABSENT || e->args.kind == K_OBJECT)
        && is_kind(&e->ext, K_INT, -1, -1) && is_kind(&e->ext_lower, K_INT, -1, -1)
        && is_kind(&e->corr, K_INT, -1, -1) && is_kind(&e->device, K_INT, -1, -1)
        && is_kind(&e->device_id, K_INT, -1, -1) && is_kind(&e->file, K_STRING, -1, -1)
        && is_kind(&e->nbytes, K_INT, K_FLOAT, -1) && is_kind(&e->big_bytes, K_INT, K_FLOAT, -1)
        && is_kind(&e->alloc, K_INT, K_FLOAT, -1) && is_kind(&e->reserved, K_INT, K_FLOAT, -1)
        && is_kind(&e->addr, K_INT, K_FLOAT, -1)
        && is_kind(&e->regs, K_INT, K_FLOAT, -1) && is_kind(&e->smem, K_INT, K_FLOAT, -1);
}

static inline double number_or_nan(const Value *v) {
    return (v->kind == K_INT || v->kind == K_FLOAT) ? v->num : NAN;
}

static inline int put_number(Columns *cols, int col, double value) {
    Buffer *b = &cols->numbers[col];
    if (b->len + sizeof value > b->cap && buffer_reserve(b, sizeof value)) return -1;
    memcpy(b->data + b->len, &value, sizeof value);
    b->len += sizeof value;
    return 0;
}

static inline int put_code(Interner *t, int32_t code) {
    Buffer *b = &t->codes;
    if (b->len + sizeof code > b->cap && buffer_reserve(b, sizeof code)) return -1;
    memcpy(b->data + b->len, &code, sizeof code);
    b->len += sizeof code;
    return 0;
}

/* the code of a value's text in its column (-1: absent or null, which Python reads alike) */
static int put_string(Columns *cols, int col, const Value *v) {
    int32_t code = -1;
    if (v->kind != K_ABSENT && v->kind != K_NULL) {
        code = intern(&cols->strings[col], v->p, (size_t)v->n);
        if (code < 0) return -1;
    }
    return put_code(&cols->strings[col], code);
}

static int append_part(Buffer *b, const Value *v) {
    static const char nul = 0;
    if (v->kind != K_ABSENT && buffer_append(b, v->p, (size_t)v->n)) return -1;
    return buffer_append(b, &nul, 1);
}

/* one kernel's launch configuration as a key: grid, block, registers and shared memory
   texts separated by NUL bytes (which JSON text cannot hold) */
static int put_launch(Columns *cols, const Event *e) {
    int32_t code = -1;
    if (e->grid.kind != K_ABSENT) {
        Buffer *key = &cols->launch_key;
        key->len = 0;
        if (append_part(key, &e->grid) || append_part(key, &e->block) || append_part(key, &e->regs)
            || append_part(key, &e->smem))
            return -1;
        code = intern(&cols->strings[S_LAUNCH], key->data, key->len - 1);
        if (code < 0) return -1;
    }
    return put_code(&cols->strings[S_LAUNCH], code);
}

static int put_row(Columns *cols, const Event *e, int instant) {
    double ext = e->ext.kind == K_INT ? e->ext.num : number_or_nan(&e->ext_lower);
    const Value *nbytes = e->nbytes.kind != K_ABSENT ? &e->nbytes : &e->big_bytes;
    const Value *device = e->device.kind != K_ABSENT ? &e->device : &e->device_id;
    if (put_number(cols, F_TS, number_or_nan(&e->ts))
        || put_number(cols, F_DUR, instant ? 0.0 : number_or_nan(&e->dur))
        || put_number(cols, F_EXT, ext) || put_number(cols, F_CORR, number_or_nan(&e->corr))
        || put_number(cols, F_BYTES, number_or_nan(nbytes))
        || put_number(cols, F_DEVICE, number_or_nan(device))
        || put_number(cols, F_ALLOC, number_or_nan(&e->alloc))
        || put_number(cols, F_RESERVED, number_or_nan(&e->reserved))
        || put_number(cols, F_ADDR, number_or_nan(&e->addr))
        || put_string(cols, S_CAT, &e->cat) || put_string(cols, S_NAME, &e->name)
        || put_string(cols, S_PH, &e->ph) || put_string(cols, S_PID, &e->pid)
        || put_string(cols, S_TID, &e->tid) || put_string(cols, S_DIMS, &e->dims)
        || put_string(cols, S_TYPES, &e->types) || put_string(cols, S_STRIDES, &e->strides)
        || put_string(cols, S_FILE, &e->file)
        || put_launch(cols, e))
        return -1;
    cols->rows++;
    return 0;
}

enum { OK = 0, DECLINED = 1, NO_MEMORY = 2 };

/* one event (the cursor at its brace) into the columns */
static int scan_event(Cursor *c, Columns *cols) {
    Event e;
    memset(&e, 0, sizeof e);
    if (c->p >= c->end || *c->p != '{') return DECLINED;
    if (read_object(c, &e, 1, event_field)) return DECLINED;
    if (e.ph.kind != K_STRING || e.ph.n != 3 || e.ph.escaped) return DECLINED;
    char ph = e.ph.p[1];
    if (ph == 's' || ph == 'f' || ph == 'M') return OK;   /* read by nothing */
    if (ph != 'X' && ph != 'i') return DECLINED;
    if (!fits_structs(&e)) return DECLINED;
    return put_row(cols, &e, ph == 'i') ? NO_MEMORY : OK;
}

/* a JSON array of events (``bare``: its elements alone, without the brackets) */
static int scan_array(Cursor *c, Columns *cols, int bare) {
    skip_ws(c);
    if (!bare) {
        if (c->p >= c->end || *c->p != '[') return DECLINED;
        c->p++;
        skip_ws(c);
    }
    if (bare ? c->p == c->end : (c->p < c->end && *c->p == ']')) {   /* no events */
        c->p += !bare;
    } else {
        for (;;) {
            int status = scan_event(c, cols);
            if (status != OK) return status;
            skip_ws(c);
            if (c->p >= c->end) {
                if (bare) break;
                return DECLINED;
            }
            if (*c->p == ',') { c->p++; skip_ws(c); continue; }
            if (*c->p == ']' && !bare) { c->p++; break; }
            return DECLINED;
        }
    }
    skip_ws(c);
    return c->p == c->end ? OK : DECLINED;
}

static PyObject *column_bytes(const Buffer *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
}

static PyObject *distinct_texts(const Interner *t) {
    PyObject *list = PyList_New((Py_ssize_t)t->count);
    if (!list) return NULL;
    for (size_t i = 0; i < t->count; i++) {
        size_t n;
        const char *text = interned_text(t, i, &n);
        PyObject *item = PyBytes_FromStringAndSize(text, (Py_ssize_t)n);
        if (!item) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* (rows, numbers, codes, distinct): see the module docstring */
static PyObject *columns_result(const Columns *cols) {
    PyObject *numbers = PyTuple_New(N_NUMBERS), *codes = PyTuple_New(N_STRINGS),
             *distinct = PyTuple_New(N_STRINGS);
    if (!numbers || !codes || !distinct) goto fail;
    for (int i = 0; i < N_NUMBERS; i++) {
        PyObject *item = column_bytes(&cols->numbers[i]);
        if (!item) goto fail;
        PyTuple_SET_ITEM(numbers, i, item);
    }
    for (int i = 0; i < N_STRINGS; i++) {
        PyObject *item = column_bytes(&cols->strings[i].codes);
        if (!item) goto fail;
        PyTuple_SET_ITEM(codes, i, item);
        item = distinct_texts(&cols->strings[i]);
        if (!item) goto fail;
        PyTuple_SET_ITEM(distinct, i, item);
    }
    return Py_BuildValue("(nNNN)", cols->rows, numbers, codes, distinct);
fail:
    Py_XDECREF(numbers);
    Py_XDECREF(codes);
    Py_XDECREF(distinct);
    return NULL;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data;   /* bytes only: immutable while the scan runs without the GIL */
    Py_ssize_t end = -1;
    if (!PyArg_ParseTuple(args, "S|n:scan", &data, &end)) return NULL;
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    if (end > size || end < -1) {
        PyErr_SetString(PyExc_ValueError, "end must be -1 or within the data");
        return NULL;
    }
    Columns cols;
    memset(&cols, 0, sizeof cols);
    const unsigned char *start = (const unsigned char *)PyBytes_AS_STRING(data);
    Cursor c = {start, start + (end < 0 ? size : end)};
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = scan_array(&c, &cols, end >= 0);
    Py_END_ALLOW_THREADS
    PyObject *result;
    if (status == NO_MEMORY) {
        result = PyErr_NoMemory();
    } else if (status == DECLINED) {
        Py_INCREF(Py_None);
        result = Py_None;
    } else {
        result = columns_result(&cols);
    }
    columns_free(&cols);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, end=-1) -> (rows, numbers, codes, distinct) or None\n\n"
     "The X and i events of a JSON array of trace events (with ``end``: the array's\n"
     "elements alone, without brackets, in data[:end]) as columns: ``numbers`` holds\n"
     "one float64 buffer per number column, ``codes`` one int32 buffer per string column\n"
     "(-1 for absent), ``distinct`` each string column's distinct raw JSON texts in code\n"
     "order. None: the batch is declined and must be read another way."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan",
                                    "Trace events (JSON) straight into columns.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
