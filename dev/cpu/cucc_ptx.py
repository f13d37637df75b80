"""cucc_ptx.py: dev/cpu/cucc's translator of inline PTX into C++ for the CPU runtime.

cucc hands every `asm(...)` statement of user code to translate(); the result replaces the
statement. The PTX it accepts is the subset documented in dev/cpu/include/cucc/ptx.h (mma.sync,
ldmatrix, cp.async and its groups, atom and red, and the glue around them: .reg declarations,
`{ }` scopes, @p guards, setp, mov, cvta, integer cvt, and reads of the special registers
in SPECIAL_REGISTERS); anything else raises PtxError naming
what is not supported, which cucc reports at the statement's file and line.

An asm statement becomes a GCC statement expression, so it stays one expression statement
wherever it stands (`if (c) asm(...); else ...`):

    ({ auto& cucc_out0 = (d0);                          // each output's lvalue, evaluated once
       float cucc_op0; unsigned cucc_op1 = ::cucc::ptx::reg<unsigned>(a0);   // the registers
       ... one C++ statement per PTX instruction, calling cucc/ptx.h ...
       ::cucc::ptx::store(cucc_out0, cucc_op0); })      // outputs written back

Operands follow GCC's extended asm as nvcc accepts it: constraints "h" (16-bit), "r" (32-bit),
"l" (64-bit), "f" (f32), "d" (f64) registers, "n" immediates, "=" outputs, "+" read-write
operands, "&" (ignored), %% for %, clobbers ignored (a "memory" clobber is a compiler fence).
Like nvcc: no tied ("0") operands and no named ones (%[name]). A register may stand for any
operand of its size (PTX lets a .bN register carry any type of N bits).
"""
import re


class PtxError(Exception):
    pass


# PTX types: (C++ type, bits, kind), kind "i" integer, "f" float, "p" predicate.
TYPES = {
    "pred": ("bool", 1, "p"),
    "b16": ("unsigned short", 16, "i"), "u16": ("unsigned short", 16, "i"),
    "s16": ("short", 16, "i"),
    "b32": ("unsigned", 32, "i"), "u32": ("unsigned", 32, "i"), "s32": ("int", 32, "i"),
    "b64": ("unsigned long long", 64, "i"), "u64": ("unsigned long long", 64, "i"),
    "s64": ("long long", 64, "i"),
    "f16": ("unsigned short", 16, "i"), "bf16": ("unsigned short", 16, "i"),
    "f16x2": ("unsigned", 32, "i"), "bf16x2": ("unsigned", 32, "i"),
    "f32": ("float", 32, "f"), "f64": ("double", 64, "f"),
}
# asm constraint letter -> the PTX type of its register
CONSTRAINTS = {"h": "b16", "r": "b32", "l": "b64", "f": "f32", "d": "f64"}
SUBSET = "the CPU runtime runs the inline PTX subset listed in dev/cpu/include/cucc/ptx.h"

# The read-only special registers of the PTX ISA ("Special Registers") that the subset reads, as
# C++ expressions of the calling CUDA thread. Threads are numbered x fastest; warps are threads
# 32k..32k+31 of the block, so %warpid is the linear thread index / 32 (the ISA's %warpid may
# change when a warp is rescheduled; here no warp ever moves).
LINEAR_TID = "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))"
LANE = "(unsigned)::cucc::lane_id()"
SPECIAL_REGISTERS = {
    "%laneid": LANE,
    "%warpid": "(%s >> 5)" % LINEAR_TID,
    "%lanemask_eq": "(1u << %s)" % LANE,
    "%lanemask_lt": "((1u << %s) - 1u)" % LANE,
    "%lanemask_le": "((2u << %s) - 1u)" % LANE,
    "%lanemask_gt": "(~((2u << %s) - 1u))" % LANE,
    "%lanemask_ge": "(~((1u << %s) - 1u))" % LANE,
    "%clock": "(unsigned)clock64()",
    "%clock64": "(unsigned long long)clock64()",
}
for axis in "xyz":
    SPECIAL_REGISTERS["%tid." + axis] = "threadIdx." + axis
    SPECIAL_REGISTERS["%ntid." + axis] = "blockDim." + axis
    SPECIAL_REGISTERS["%ctaid." + axis] = "blockIdx." + axis
    SPECIAL_REGISTERS["%nctaid." + axis] = "gridDim." + axis


class Reg:
    """A register of the translated statement: an asm operand or a .reg declaration."""

    def __init__(self, name, ptx_type):
        self.name = name
        self.ctype, self.bits, self.kind = TYPES[ptx_type]


class Imm:
    """An immediate: a literal or an "n" operand (its C++ expression)."""

    def __init__(self, text):
        self.text = text


# ------------------------------------------------------------------------------------------
# The asm statement: template strings and operand lists.

def split_top(text, sep):
    """The parts of text between the separators outside brackets and string literals."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = skip_string(text, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def skip_string(text, i):
    q, j = text[i], i + 1
    while j < len(text) and text[j] != q:
        j += 2 if text[j] == "\\" else 1
    return j + 1


ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0", "a": "\a",
           "v": "\v", "f": "\f", "?": "?"}


def string_literals(text):
    """The value of a sequence of adjacent C string literals."""
    out, i = [], 0
    text = text.strip()
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        if text[i] != '"':
            raise PtxError("the asm template must be string literals")
        end = skip_string(text, i)
        body, j = text[i + 1:end - 1], 0
        while j < len(body):
            if body[j] == "\\" and j + 1 < len(body):
                esc = body[j + 1]
                if esc == "x":
                    m = re.match(r"[0-9a-fA-F]+", body[j + 2:])
                    out.append(chr(int(m.group(0), 16)))
                    j += 2 + len(m.group(0))
                    continue
                out.append(ESCAPES.get(esc, esc))
                j += 2
            else:
                out.append(body[j])
                j += 1
        i = end
    return "".join(out)


OPERAND = re.compile(r'\s*("(?:[^"\\]|\\.)*")\s*\((.*)\)\s*$', re.S)


def parse_operands(section):
    """[(constraint, expression)] of one operand list."""
    ops = []
    for part in (p for p in split_top(section, ",") if p.strip()):
        if part.strip().startswith("["):
            raise PtxError("named asm operands ([name]) are not supported (nvcc rejects them too)")
        m = OPERAND.match(part)
        if not m:
            raise PtxError("cannot parse the asm operand '%s'" % " ".join(part.split()))
        ops.append((string_literals(m.group(1)), " ".join(m.group(2).split())))
    return ops


# ------------------------------------------------------------------------------------------
# PTX tokens and statements.

TOKEN = re.compile(r"""
    (?P<space>\s+|//[^\n]*|/\*.*?\*/)
  | (?P<operand>\x00(?P<index>\d+)\x00)
  | (?P<directive>\.[A-Za-z_]\w*)
  | (?P<number>0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|(?:0[xX][0-9a-fA-F]+|\d+)[uU]?)
  | (?P<word>[A-Za-z_$%][\w$]*(?:\.[\w$]+(?:::[\w$]+)*)*)
  | (?P<punct>[{}\[\],;+\-@!<>:|])
""", re.X | re.S)


def tokenize(template):
    tokens, i = [], 0
    while i < len(template):
        m = TOKEN.match(template, i)
        if not m:
            raise PtxError("unexpected character %r in the PTX" % template[i])
        i = m.end()
        if m.group("space"):
            continue
        kind = m.lastgroup if m.lastgroup != "index" else "operand"
        tokens.append(("operand", int(m.group("index"))) if m.group("operand")
                      else (kind, m.group(0)))
    return tokens


def substitute_operands(template, extended):
    """Replaces %N by operand markers and %% by %. Basic asm (no colon) keeps its %."""
    if not extended:
        return template
    out, i = [], 0
    while i < len(template):
        c = template[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        nxt = template[i + 1:i + 2]
        if nxt == "%":
            out.append("%")
            i += 2
        elif nxt.isdigit():
            m = re.match(r"\d+", template[i + 1:])
            out.append("\x00%s\x00" % m.group(0))
            i += 1 + len(m.group(0))
        else:
            raise PtxError("'%%%s' in an asm template is not supported (operands are %%N, and "
                           "%%%% stands for %%)" % nxt)
    return "".join(out)


class Statement:
    def __init__(self, guard, negate, opcode, operands):
        self.guard, self.negate, self.opcode, self.operands = guard, negate, opcode, operands


def parse_statements(tokens):
    """Yields ("open"), ("close"), ("reg", type, [names]) and ("ins", Statement) items."""
    i, items = 0, []

    def expect(kind, value=None):
        nonlocal i
        if i >= len(tokens) or tokens[i][0] != kind or value not in (None, tokens[i][1]):
            got = tokens[i][1] if i < len(tokens) else "the end"
            raise PtxError("expected %s in the PTX, found '%s'" % (value or kind, got))
        i += 1
        return tokens[i - 1][1]

    while i < len(tokens):
        kind, value = tokens[i]
        if (kind, value) == ("punct", "{"):
            items.append(("open",))
            i += 1
        elif (kind, value) == ("punct", "}"):
            items.append(("close",))
            i += 1
        elif (kind, value) == ("punct", ";"):
            i += 1
        elif kind == "directive":
            if value != ".reg":
                raise PtxError("the directive %s is not supported in inline PTX here" % value)
            i += 1
            ptx_type = expect("directive")[1:]
            if ptx_type not in TYPES:
                raise PtxError(".reg .%s: unsupported register type" % ptx_type)
            names = []
            while True:
                name = expect("word")
                if i < len(tokens) and tokens[i] == ("punct", "<"):
                    i += 1
                    count = int(expect("number"), 0)
                    expect("punct", ">")
                    names += ["%s%d" % (name, k) for k in range(count)]
                else:
                    names.append(name)
                if i < len(tokens) and tokens[i] == ("punct", ","):
                    i += 1
                    continue
                break
            expect("punct", ";")
            items.append(("reg", ptx_type, names))
        else:
            guard, negate = None, False
            if (kind, value) == ("punct", "@"):
                i += 1
                if i < len(tokens) and tokens[i] == ("punct", "!"):
                    negate = True
                    i += 1
                guard = tokens[i]
                i += 1
            opcode = expect("word")
            if i < len(tokens) and tokens[i] == ("punct", ":"):
                raise PtxError("labels (%s:) are not supported in inline PTX here" % opcode)
            start = i
            while i < len(tokens) and tokens[i] != ("punct", ";"):
                i += 1
            if i >= len(tokens):
                raise PtxError("the PTX instruction '%s' does not end with ';'" % opcode)
            operands = split_operand_tokens(tokens[start:i])
            items.append(("ins", Statement(guard, negate, opcode, operands)))
            i += 1
    return items


def split_operand_tokens(tokens):
    """The operand token lists of one instruction, split at commas outside { } and [ ]."""
    ops, cur, depth = [], [], 0
    for tok in tokens:
        if tok in (("punct", "{"), ("punct", "[")):
            depth += 1
        elif tok in (("punct", "}"), ("punct", "]")):
            depth -= 1
        if tok == ("punct", ",") and depth == 0:
            ops.append(cur)
            cur = []
        else:
            cur.append(tok)
    if cur:
        ops.append(cur)
    return ops


# ------------------------------------------------------------------------------------------
# Translation of instructions.

def c_string(s):
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


class Translator:
    def __init__(self, operand_regs, file, line):
        self.operand_regs = operand_regs  # index -> Reg or Imm
        self.scopes = [{}]
        self.file, self.line = file, line
        self.decls, self.code, self.sites = [], [], 0

    # -- operands
    def lookup(self, tok):
        kind, value = tok
        if kind == "operand":
            if value not in self.operand_regs:
                raise PtxError("the asm has no operand %%%d" % value)
            return self.operand_regs[value]
        if kind == "number":
            if value[:2] in ("0f", "0F", "0d", "0D"):  # the bits of an f32 or f64 literal
                single = value[1] in "fF"
                return Imm("::cucc::ptx::bits<%s>(0x%s%s)" % (
                    "float" if single else "double", value[2:], "u" if single else "ull"))
            return Imm(value.rstrip("uU"))
        if kind == "word":
            for scope in reversed(self.scopes):
                if value in scope:
                    return scope[value]
            if value in SPECIAL_REGISTERS:
                return Imm(SPECIAL_REGISTERS[value])
            raise PtxError("'%s' is not a declared register or a supported special register (%s)"
                           % (value, ", ".join(sorted(SPECIAL_REGISTERS))))
        raise PtxError("unexpected '%s' where a register or an immediate belongs" % value)

    def scalar(self, toks, what):
        if len(toks) == 1:
            return self.lookup(toks[0])
        if len(toks) == 2 and toks[0] == ("punct", "-") and toks[1][0] == "number":
            return Imm("-" + toks[1][1].rstrip("uU"))
        raise PtxError("%s must be a register or an immediate" % what)

    def reg(self, toks, what):
        r = self.scalar(toks, what)
        if not isinstance(r, Reg):
            raise PtxError("%s must be a register" % what)
        return r

    def vector(self, toks, n, what):
        if not toks or toks[0] != ("punct", "{") or toks[-1] != ("punct", "}"):
            if n == 1:
                return [self.reg(toks, what)]
            raise PtxError("%s must be a vector {r0, ...} of %d registers" % (what, n))
        elems = split_operand_tokens(toks[1:-1])
        if len(elems) != n:
            raise PtxError("%s must have %d registers, not %d" % (what, n, len(elems)))
        return [self.reg(e, what) for e in elems]

    def address(self, toks, what):
        """[reg], [reg+imm], [reg-imm] or [imm]: a C++ unsigned long long expression."""
        if len(toks) < 3 or toks[0] != ("punct", "[") or toks[-1] != ("punct", "]"):
            raise PtxError("%s must be an address [reg], [reg+offset]" % what)
        inner = toks[1:-1]
        base = self.scalar(inner[:1], what)
        offset = ""
        if len(inner) == 3 and inner[1] in (("punct", "+"), ("punct", "-")) \
                and inner[2][0] == "number":
            offset = " %s %s" % (inner[1][1], inner[2][1].rstrip("uU"))
        elif len(inner) != 1:
            raise PtxError("%s: unsupported address form" % what)
        if isinstance(base, Imm):
            return "((unsigned long long)(%s)%s)" % (base.text, offset)
        if base.kind != "i" or base.bits not in (32, 64):
            raise PtxError("%s: an address register must be 32 or 64 bits" % what)
        # the sum wraps at the register's width, as a 32-bit address does on the GPU
        width = "unsigned" if base.bits == 32 else "unsigned long long"
        return "((unsigned long long)(%s)(%s%s))" % (width, base.name, offset)

    def value(self, operand, ptx_type):
        """A C++ expression of the operand's value as ptx_type."""
        ctype, bits, kind = TYPES[ptx_type]
        if isinstance(operand, Imm):
            return "((%s)(%s))" % (ctype, operand.text)
        if operand.ctype == ctype:
            return operand.name
        if operand.bits != bits:
            raise PtxError("a %d-bit register where a .%s operand belongs"
                           % (operand.bits, ptx_type))
        return "::cucc::ptx::bits<%s>(%s)" % (ctype, operand.name)

    def assign(self, reg, expr, ptx_type):
        ctype, bits, _ = TYPES[ptx_type]
        if reg is None:
            return "(void)(%s);" % expr
        if reg.ctype == ctype:
            return "%s = %s;" % (reg.name, expr)
        if reg.bits != bits:
            raise PtxError("a %d-bit register where a .%s result belongs" % (reg.bits, ptx_type))
        return "%s = ::cucc::ptx::bits<%s>(%s);" % (reg.name, reg.ctype, expr)

    def immediate(self, toks, what):
        r = self.scalar(toks, what)
        if not isinstance(r, Imm):
            raise PtxError("%s must be an immediate (a literal or an \"n\" operand)" % what)
        return "(long long)(%s)" % r.text

    def site(self, opcode):
        self.sites += 1
        name = "cucc_site%d" % self.sites
        self.decls.append("static constexpr ::cucc::ptx::Site %s{%s, %d, %s};"
                          % (name, c_string(self.file), self.line, c_string(opcode)))
        return "&" + name

    # -- statements
    def run(self, items):
        for item in items:
            if item[0] == "open":
                self.scopes.append({})
                self.code.append("{")
            elif item[0] == "close":
                if len(self.scopes) == 1:
                    raise PtxError("unbalanced '}' in the PTX")
                self.scopes.pop()
                self.code.append("}")
            elif item[0] == "reg":
                ptx_type, names = item[1], item[2]
                for name in names:
                    cname = "cucc_reg_" + re.sub(r"[^\w]", lambda m: "_%02x" % ord(m.group(0)),
                                                 name)
                    self.scopes[-1][name] = Reg(cname, ptx_type)
                    self.code.append("%s %s = {};" % (TYPES[ptx_type][0], cname))
            else:
                self.instruction(item[1])
        if len(self.scopes) != 1:
            raise PtxError("unbalanced '{' in the PTX")

    def instruction(self, st):
        parts = st.opcode.split(".")
        handler = HANDLERS.get(parts[0])
        if handler is None or (parts[0] == "cp" and parts[1:2] != ["async"]):
            raise PtxError("the PTX instruction '%s' is not supported: %s" % (st.opcode, SUBSET))
        body = handler(self, st, parts)
        if st.guard is not None:
            p = self.lookup(st.guard)
            if not isinstance(p, Reg) or p.kind != "p":
                raise PtxError("the guard of '%s' must be a .pred register" % st.opcode)
            body = "if (%s%s) { %s }" % ("!" if st.negate else "", p.name, body)
        self.code.append(body)


def unsupported(opcode, why=""):
    return PtxError("'%s' is not supported%s: %s" % (opcode, why, SUBSET))


def expect_count(st, n, form):
    if len(st.operands) != n:
        raise PtxError("%s takes %d operands: %s" % (st.opcode, n, form))


MMA_TYPES = {("f32", "bf16", "bf16", "f32"): "bf16", ("f32", "f16", "f16", "f32"): "f16",
             ("f16", "f16", "f16", "f16"): "f16acc"}


def mma(t, st, parts):
    if len(parts) != 10 or parts[1:3] != ["sync", "aligned"] \
            or parts[3] not in ("m16n8k8", "m16n8k16") or parts[4:6] != ["row", "col"] \
            or tuple(parts[6:10]) not in MMA_TYPES:
        raise unsupported(st.opcode, " (mma.sync.aligned.{m16n8k8,m16n8k16}.row.col with "
                          ".f32.bf16.bf16.f32, .f32.f16.f16.f32 or .f16.f16.f16.f16)")
    K = 16 if parts[3] == "m16n8k16" else 8
    kind = MMA_TYPES[tuple(parts[6:10])]
    expect_count(st, 4, "d, a, b, c")
    acc_type, acc_n = ("f16x2", 2) if kind == "f16acc" else ("f32", 4)
    d = t.vector(st.operands[0], acc_n, "d")
    a = t.vector(st.operands[1], K // 4, "a")
    b = t.vector(st.operands[2], K // 8, "b")
    c = t.vector(st.operands[3], acc_n, "c")
    acc_c = TYPES[acc_type][0]
    code = ["unsigned cucc_a[%d] = {%s};" % (K // 4, ", ".join(t.value(r, "b32") for r in a)),
            "unsigned cucc_b[%d] = {%s};" % (K // 8, ", ".join(t.value(r, "b32") for r in b)),
            "%s cucc_c[%d] = {%s};" % (acc_c, acc_n, ", ".join(t.value(r, acc_type) for r in c)),
            "%s cucc_d[%d];" % (acc_c, acc_n)]
    site = t.site(st.opcode)
    if kind == "f16acc":
        code.append("::cucc::ptx::mma_f16(%s, %d, cucc_d, cucc_a, cucc_b, cucc_c);" % (site, K))
    else:
        code.append("::cucc::ptx::mma(%s, %d, ::cucc::ptx::Operand::%s, cucc_d, cucc_a, cucc_b, "
                    "cucc_c);" % (site, K, kind))
    code += [t.assign(r, "cucc_d[%d]" % i, acc_type) for i, r in enumerate(d)]
    return "{ %s }" % " ".join(code)


def ldmatrix(t, st, parts):
    # qualifiers in the ISA's order or another (CUTLASS writes .x4.m8n8)
    quals = parts[3:] if parts[1:3] == ["sync", "aligned"] else []
    nums = [q for q in quals if q in ("x1", "x2", "x4")]
    spaces = [q for q in quals if q in ("shared", "shared::cta")]
    known = {"m8n8", "trans", "b16", "x1", "x2", "x4", "shared", "shared::cta"}
    if "m8n8" not in quals or "b16" not in quals or len(nums) != 1 or len(spaces) > 1 \
            or not set(quals) <= known or len(set(quals)) != len(quals):
        raise unsupported(st.opcode,
                          " (ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}{.shared{::cta}}.b16)")
    trans = "trans" in quals
    space = "shared" if spaces else "generic"
    num = int(nums[0][1])
    expect_count(st, 2, "d, [address]")
    d = t.vector(st.operands[0], num, "d")
    addr = t.address(st.operands[1], "the row address")
    code = ["unsigned cucc_d[%d];" % num,
            "::cucc::ptx::ldmatrix(%s, %d, %s, ::cucc::ptx::Space::%s, %s, cucc_d);"
            % (t.site(st.opcode), num, "true" if trans else "false", space, addr)]
    code += [t.assign(r, "cucc_d[%d]" % i, "b32") for i, r in enumerate(d)]
    return "{ %s }" % " ".join(code)


def cp_async(t, st, parts):
    if parts[2:] == ["commit_group"]:
        expect_count(st, 0, "none")
        return "::cucc::ptx::cp_async_commit_group(%s);" % t.site(st.opcode)
    if parts[2:] == ["wait_group"]:
        expect_count(st, 1, "N (an immediate)")
        return "::cucc::ptx::cp_async_wait_group(%s, %s);" % (t.site(st.opcode),
                                                               t.immediate(st.operands[0], "N"))
    if parts[2:] == ["wait_all"]:
        expect_count(st, 0, "none")
        return "::cucc::ptx::cp_async_wait_group(%s, -1);" % t.site(st.opcode)
    quals = parts[2:]
    if len(quals) < 3 or quals[0] not in ("ca", "cg") or quals[1] not in ("shared", "shared::cta") \
            or quals[2] != "global" \
            or not set(quals[3:]) <= {"L2::cache_hint", "L2::64B", "L2::128B", "L2::256B"}:
        raise unsupported(st.opcode, " (cp.async.{ca,cg}.shared{::cta}.global{.L2::cache_hint}"
                          "{.L2::64B,.L2::128B,.L2::256B}, commit_group, wait_group, wait_all)")
    hint = "L2::cache_hint" in quals
    ops = st.operands[:-1] if hint else st.operands
    if hint and len(st.operands) >= 4:
        t.reg(st.operands[-1], "cache-policy")
    if len(ops) not in (3, 4):
        raise PtxError("%s takes [dst], [src], cp-size{, src-size or ignore-src}%s"
                       % (st.opcode, ", cache-policy" if hint else ""))
    dst = t.address(ops[0], "dst")
    src = t.address(ops[1], "src")
    size = t.immediate(ops[2], "cp-size")
    literal = ops[2][0][1] if len(ops[2]) == 1 and ops[2][0][0] == "number" else None
    sizes = (16,) if quals[0] == "cg" else (4, 8, 16)
    if literal is not None and int(literal.rstrip("uU"), 0) not in sizes:
        raise PtxError("%s: cp-size %s is not %s" % (st.opcode, literal,
                                                     " or ".join(str(n) for n in sizes)))
    src_size = size
    if len(ops) == 4:
        extra = t.scalar(ops[3], "src-size")
        if isinstance(extra, Reg) and extra.kind == "p":
            src_size = "(%s ? 0ll : %s)" % (extra.name, size)  # ignore-src
        else:
            src_size = "(long long)%s" % t.value(extra, "u32")
    return "::cucc::ptx::cp_async(%s, %s, %s, %s, %s, %s);" % (
        t.site(st.opcode), "true" if quals[0] == "cg" else "false", dst, src, size, src_size)


# atom / red: which types each operation takes (what ptxas accepts: the ISA's, and .u32 for cas).
ATOM_OPS = {
    "and": ("and_", {"b32", "b64"}), "or": ("or_", {"b32", "b64"}), "xor": ("xor_", {"b32", "b64"}),
    "cas": ("cas", {"b16", "b32", "b64", "u32"}), "exch": ("exch", {"b32", "b64"}),
    "add": ("add", {"u32", "s32", "u64", "f32", "f64"}),
    "inc": ("inc", {"u32"}), "dec": ("dec", {"u32"}),
    "min": ("min", {"u32", "s32", "u64", "s64"}), "max": ("max", {"u32", "s32", "u64", "s64"}),
}
SEMS = {"relaxed", "acquire", "release", "acq_rel"}
SCOPES = {"cta", "cluster", "gpu", "sys"}


def atomic(t, st, parts):
    red = parts[0] == "red"
    op = ptx_type = None
    space, hint = "generic", False
    for q in parts[1:]:
        if q in SEMS and not (red and q in ("acquire", "acq_rel")):
            continue
        if q in SCOPES:
            continue
        if q in ("global", "shared", "shared::cta"):
            space = "global" if q == "global" else "shared"
        elif q in ATOM_OPS and op is None and not (red and q in ("cas", "exch")):
            op = q
        elif q in TYPES and ptx_type is None:
            ptx_type = q
        elif q == "L2::cache_hint":
            hint = True
        else:
            raise unsupported(st.opcode, " (qualifier .%s)" % q)
    if op is None or ptx_type not in ATOM_OPS[op][1]:
        forms = ", ".join("%s.{%s}" % (o, ",".join(sorted(ts))) for o, (_, ts) in ATOM_OPS.items()
                          if not (red and o in ("cas", "exch")))
        raise unsupported(st.opcode, " (%s{.sem}{.scope}{.global,.shared}.op.type with op.type "
                          "one of %s)" % (parts[0], forms))
    ops = st.operands[:-1] if hint else st.operands
    want = (2 if red else 3) + (op == "cas")
    if len(ops) != want:
        form = ("[a], b" if red else "d, [a], b") + (", c" if op == "cas" else "")
        raise PtxError("%s takes %s%s" % (st.opcode, form, ", cache-policy" if hint else ""))
    if not red:
        d = None if ops[0] == [("word", "_")] else t.reg(ops[0], "d")
        ops = ops[1:]
    addr = t.address(ops[0], "a")
    b = t.value(t.scalar(ops[1], "b"), ptx_type)
    c = t.value(t.scalar(ops[2], "c"), ptx_type) if op == "cas" else "(%s)0" % TYPES[ptx_type][0]
    call = ("::cucc::ptx::atom<%s>(%s, ::cucc::ptx::Space::%s, %s, ::cucc::ptx::AtomOp::%s, %s, "
            "%s)") % (
        TYPES[ptx_type][0], t.site(st.opcode), space, addr, ATOM_OPS[op][0], b, c)
    if red:
        return "(void)%s;" % call
    return t.assign(d, call, ptx_type)


CMP_INT = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
           "lo": "<", "ls": "<=", "hi": ">", "hs": ">="}
CMP_FLOAT = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def setp(t, st, parts):
    if len(parts) != 3 or parts[2] not in TYPES or TYPES[parts[2]][2] == "p" \
            or parts[2] in ("f16", "bf16", "f16x2", "bf16x2"):
        raise unsupported(st.opcode, " (setp.CmpOp.type p, a, b)")
    cmp, ptx_type = parts[1], parts[2]
    table = CMP_FLOAT if TYPES[ptx_type][2] == "f" else CMP_INT
    if cmp not in table or (ptx_type.startswith("b") and cmp not in ("eq", "ne")) \
            or (cmp in ("lo", "ls", "hi", "hs") and not ptx_type.startswith("u")):
        raise unsupported(st.opcode, " (comparison .%s on .%s)" % (cmp, ptx_type))
    expect_count(st, 3, "p, a, b")
    p = t.reg(st.operands[0], "p")
    if p.kind != "p":
        raise PtxError("%s: the destination must be a .pred register" % st.opcode)
    a = t.value(t.scalar(st.operands[1], "a"), ptx_type)
    b = t.value(t.scalar(st.operands[2], "b"), ptx_type)
    expr = "(%s %s %s)" % (a, table[cmp], b)
    if TYPES[ptx_type][2] == "f" and cmp == "ne":  # ordered: false when either is NaN
        expr = "(%s && %s == %s && %s == %s)" % (expr, a, a, b, b)
    return "%s = %s;" % (p.name, expr)


def mov(t, st, parts):
    if len(parts) != 2 or parts[1] not in TYPES or parts[1] in ("f16x2", "bf16x2"):
        raise unsupported(st.opcode, " (mov.type d, a with a register, an immediate or a vector)")
    expect_count(st, 2, "d, a")
    ptx_type = parts[1]
    d_tok, a_tok = st.operands
    if ("punct", "{") in (d_tok[0], a_tok[0]):  # pack or unpack: mov.b32 d, {lo, hi} and back
        bits = TYPES[ptx_type][1]
        half = {32: "b16", 64: "b32"}.get(bits)
        if half is None or not ptx_type.startswith("b"):
            raise unsupported(st.opcode, " (vector mov is .b32 {b16, b16} or .b64 {b32, b32})")
        hc, wc = TYPES[half][0], TYPES[ptx_type][0]
        if d_tok[0] == ("punct", "{"):
            lo, hi = t.vector(d_tok, 2, "d")
            a = t.value(t.scalar(a_tok, "a"), ptx_type)
            return "%s %s" % (t.assign(lo, "(%s)(%s)" % (hc, a), half),
                              t.assign(hi, "(%s)(%s >> %d)" % (hc, a, bits // 2), half))
        lo, hi = t.vector(a_tok, 2, "a")
        expr = "((%s)%s | (%s)%s << %d)" % (wc, t.value(lo, half), wc, t.value(hi, half), bits // 2)
        return t.assign(t.reg(d_tok, "d"), expr, ptx_type)
    return t.assign(t.reg(d_tok, "d"), t.value(t.scalar(a_tok, "a"), ptx_type), ptx_type)


def cvta(t, st, parts):
    expect_count(st, 2, "d, a")
    d, a = t.reg(st.operands[0], "d"), t.scalar(st.operands[1], "a")
    width = parts[-1]
    if width not in ("u32", "u64"):
        raise unsupported(st.opcode)
    space = ".".join(parts[1:-1])
    if space in ("to.shared", "to.shared::cta"):
        expr = "::cucc::ptx::to_shared((const void*)(unsigned long long)%s, %s)" % (
            t.value(a, "u64"), t.site(st.opcode))
        return t.assign(d, "(%s)%s" % (TYPES[width][0], expr), width)
    if space in ("shared", "shared::cta") and width == "u64":
        expr = "(unsigned long long)::cucc::ptx::from_shared(%s, %s)" % (
            t.value(a, "u64"), t.site(st.opcode))
        return t.assign(d, expr, "u64")
    if space in ("to.global", "global") and width == "u64":
        return t.assign(d, t.value(a, "u64"), "u64")
    raise unsupported(st.opcode, " (cvta{.to}.shared{::cta}.{u32,u64}, cvta{.to}.global.u64)")


INT_TYPES = {"u16", "u32", "u64", "s16", "s32", "s64"}


def cvt(t, st, parts):
    if len(parts) != 3 or parts[1] not in INT_TYPES or parts[2] not in INT_TYPES:
        raise unsupported(st.opcode, " (only integer cvt.dtype.atype without rounding or .sat)")
    expect_count(st, 2, "d, a")
    value = t.value(t.scalar(st.operands[1], "a"), parts[2])
    return t.assign(t.reg(st.operands[0], "d"), "(%s)%s" % (TYPES[parts[1]][0], value), parts[1])


HANDLERS = {"mma": mma, "ldmatrix": ldmatrix, "cp": cp_async, "atom": atomic, "red": atomic,
            "setp": setp, "mov": mov, "cvta": cvta, "cvt": cvt}


# ------------------------------------------------------------------------------------------

def translate(inner, file, line):
    """C++ for the asm statement whose parenthesized part is `inner` (without the parentheses),
    written at file:line. Raises PtxError."""
    sections = split_top(inner, ":")  # template : outputs : inputs : clobbers
    if len(sections) > 4:
        raise PtxError("asm goto and more than three operand lists are not supported")
    template = string_literals(sections[0])
    outputs = parse_operands(sections[1]) if len(sections) > 1 else []
    inputs = parse_operands(sections[2]) if len(sections) > 2 else []
    operands = outputs + inputs
    binds, decls, stores, regs = [], [], [], {}
    for i, (constraint, expr) in enumerate(operands):
        is_output = i < len(outputs)
        mode = constraint[0] if constraint[:1] in ("=", "+") else ""
        letters = constraint.lstrip("=+").replace("&", "")
        if is_output != bool(mode):
            raise PtxError("operand %d ('%s'): outputs take '=' or '+', inputs neither"
                           % (i, constraint))
        if letters == "n" and not is_output:
            regs[i] = Imm(expr)
            continue
        if letters not in CONSTRAINTS:
            raise PtxError("operand %d: constraint '%s' is not supported (h, r, l, f, d, n)"
                           % (i, constraint))
        r = Reg("cucc_op%d" % i, CONSTRAINTS[letters])
        regs[i] = r
        if is_output:
            binds.append("auto& cucc_out%d = (%s);" % (i, expr))
            init = " = ::cucc::ptx::reg<%s>(cucc_out%d)" % (r.ctype, i) if mode == "+" else " = {}"
            decls.append("%s %s%s;" % (r.ctype, r.name, init))
            stores.append("::cucc::ptx::store(cucc_out%d, %s);" % (i, r.name))
        else:
            decls.append("%s %s = ::cucc::ptx::reg<%s>(%s);" % (r.ctype, r.name, r.ctype, expr))
    t = Translator(regs, file, line)
    ptx = substitute_operands(template, len(sections) > 1)
    t.run(parse_statements(tokenize(ptx)))
    clobbers = sections[3] if len(sections) > 3 else ""
    fence = "::cucc::ptx::memory_clobber();" if "memory" in clobbers else ""
    return "({ %s })" % " ".join(t.decls + binds + decls + [fence] + t.code + stores + ["(void)0;"])
