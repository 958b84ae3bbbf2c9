#!/usr/bin/env python3
"""Write the seed corpora of fuzz/corpus/<target>/ from the project's own files.

    python3 fuzz/make_seeds.py [SHARED_DIR]    (default ../shared, beside the repository)

Sources: the embedded model models/tiny-relu-llama-f16.gguf (metadata kept, tensors shrunk to a
few elements so that a seed stays small and fast), the reference model's HF files in
SHARED/models/tiny-relu-llama/ (config.json, tokenizer.json cut down, tokenizer_config.json,
tokenizer.model, the safetensors header with its shapes shrunk), the commands of
supervisor/supervisor.h, and hand-made variants that reach the other branches (each tensor type,
PowerInfer magic, a gpt2 tokenizer, byte-level BPE tokenizer.json files for each pre-tokenizer).
Seeds are named seed-*; what campaigns add is named by libFuzzer (a hash). Re-running replaces the
seed-* files only."""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, '..', 'shared')
HF = os.path.join(SHARED, 'models', 'tiny-relu-llama')
SEP = b'\n#--next-file--\n'  # fuzz_util.h FUZZ_SEP
KEEP_TOKENS = 300  # pieces kept of the 4096 of the reference vocabulary


def put(target, name, data):
    d = os.path.join(ROOT, 'fuzz', 'corpus', target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, 'seed-' + name), 'wb') as f:
        f.write(data)


# ---------------------------------------------------------------- GGUF
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
SCALAR = {T_U8: '<B', T_I8: '<b', T_U16: '<H', T_I16: '<h', T_U32: '<I', T_I32: '<i', T_F32: '<f',
          T_BOOL: '<B', T_U64: '<Q', T_I64: '<q', T_F64: '<d'}
# ggml type: (block size, bytes per block)
GTYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 10: (256, 84),
          11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292), 20: (32, 18),
          23: (256, 136), 26: (1, 4), 30: (1, 2)}


def gstr(s):
    if isinstance(s, str):
        s = s.encode()
    return struct.pack('<Q', len(s)) + s


def read_value(b, pos, t):
    if t in SCALAR:
        v = struct.unpack_from(SCALAR[t], b, pos)[0]
        return v, pos + struct.calcsize(SCALAR[t])
    if t == T_STR:
        n = struct.unpack_from('<Q', b, pos)[0]
        return b[pos + 8:pos + 8 + n], pos + 8 + n
    if t == T_ARR:
        et, n = struct.unpack_from('<IQ', b, pos)
        pos += 12
        out = []
        for _ in range(n):
            v, pos = read_value(b, pos, et)
            out.append(v)
        return (et, out), pos
    raise ValueError(t)


def write_value(t, v):
    if t in SCALAR:
        return struct.pack(SCALAR[t], v)
    if t == T_STR:
        return gstr(v)
    et, items = v
    return struct.pack('<IQ', et, len(items)) + b''.join(write_value(et, x) for x in items)


def read_gguf(path):
    b = open(path, 'rb').read()
    magic, ver, nt, nkv = struct.unpack_from('<IIQQ', b, 0)
    pos, kvs, tensors = 24, [], []
    for _ in range(nkv):
        n = struct.unpack_from('<Q', b, pos)[0]
        key = b[pos + 8:pos + 8 + n].decode()
        pos += 8 + n
        t = struct.unpack_from('<I', b, pos)[0]
        v, pos = read_value(b, pos + 4, t)
        kvs.append((key, t, v))
    for _ in range(nt):
        n = struct.unpack_from('<Q', b, pos)[0]
        name = b[pos + 8:pos + 8 + n].decode()
        pos += 8 + n
        nd = struct.unpack_from('<I', b, pos)[0]
        ne = list(struct.unpack_from('<%dQ' % nd, b, pos + 4))
        pos += 4 + 8 * nd
        gt, off = struct.unpack_from('<IQ', b, pos)
        pos += 12
        tensors.append((name, ne, gt))
    return magic, ver, kvs, tensors


def write_gguf(kvs, tensors, magic=b'GGUF', version=3, align=32, fill=0x3c):
    """tensors: (name, ne, ggml type); data is a byte pattern (0x3c00 is 1.0 in f16)."""
    out = magic + struct.pack('<IQQ', version, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += gstr(key) + struct.pack('<I', t) + write_value(t, v)
    off, infos, datas = 0, b'', []
    for name, ne, gt in tensors:
        blk, bs = GTYPES[gt]
        n = 1
        for d in ne:
            n *= d
        nbytes = n // blk * bs
        infos += gstr(name) + struct.pack('<I', len(ne)) + struct.pack('<%dQ' % len(ne), *ne) + struct.pack('<IQ', gt, off)
        datas.append((off, bytes([fill]) * nbytes))
        off += (nbytes + align - 1) // align * align
    out += infos
    out += b'\0' * ((-len(out)) % align)
    data = bytearray(off)
    for o, d in datas:
        data[o:o + len(d)] = d
    return out + bytes(data)


def shrink(ne, gt):
    blk = GTYPES[gt][0]
    return [max(blk, 32 if blk > 1 else 4)] + [min(d, 2) for d in ne[1:]]


def gguf_seeds():
    magic, ver, kvs, tensors = read_gguf(os.path.join(ROOT, 'models', 'tiny-relu-llama-f16.gguf'))
    small = [(n, shrink(ne, gt), gt) for n, ne, gt in tensors]
    # the vocabulary cut to its first KEEP_TOKENS pieces (the byte pieces are among them) and
    # config-style ids kept inside it, so the seed stays small
    cut = []
    for k, t, v in kvs:
        if t == T_ARR and k.startswith('tokenizer.ggml.') and len(v[1]) > KEEP_TOKENS:
            v = (v[0], v[1][:KEEP_TOKENS])
        cut.append((k, t, v))
    put('gguf', 'tiny-shrunk.gguf', write_gguf(cut, small))
    put('gguf', 'tiny-header-only.gguf', write_gguf(kvs[:6], []))
    # every metadata type, and a tensor of each ggml type
    every = [('general.architecture', T_STR, 'llama'), ('general.alignment', T_U32, 64)]
    for t, fmt in SCALAR.items():
        every.append(('k.%d' % t, t, 1))
        every.append(('a.%d' % t, T_ARR, (t, [0, 1, 1 if t == T_BOOL else 2])))
    every += [('s', T_STR, 'x\0y'), ('a.str', T_ARR, (T_STR, ['a', '', 'b\0c'])), ('a.empty', T_ARR, (T_U8, []))]
    put('gguf', 'every-type.gguf', write_gguf(every, [('t.%d' % gt, [max(64, GTYPES[gt][0]), 2], gt) for gt in GTYPES] +
                                              [('empty', [0], 0), ('4d', [2, 2, 2, 2], 0)], align=64))
    # PowerInfer: magic PWRI, predictor tensors and a gpuidx-like layout
    pw = [('general.architecture', T_STR, 'generic.gpu_index'), ('generic.gpu_index.block_count', T_U32, 1),
          ('split.vram_capacity', T_U64, 1 << 20), ('powerinfer.sparse_threshold', T_F32, 0.0)]
    put('gguf', 'pwri.gguf', write_gguf(pw, [('blk.0.gpu_idx', [8], 26), ('blk.0.gpu_bucket', [0], 26),
                                              ('blk.0.fc1.weight', [4, 2], 0)], magic=b'PWRI'))
    # a gpt2 (byte-level BPE) tokenizer, so that tok_new_from_gguf's BPE path has a seed
    sym = [bytes_to_unicode(b) for b in range(256)]
    toks = sym + ['he', 'll', 'hell', 'hello', '<|endoftext|>', '<|im_start|>']
    ttypes = [1] * (len(toks) - 2) + [3, 3]
    bpe = [('general.architecture', T_STR, 'qwen2'), ('tokenizer.ggml.model', T_STR, 'gpt2'),
           ('tokenizer.ggml.pre', T_STR, 'qwen2'), ('tokenizer.ggml.tokens', T_ARR, (T_STR, toks)),
           ('tokenizer.ggml.token_type', T_ARR, (T_I32, ttypes)),
           ('tokenizer.ggml.merges', T_ARR, (T_STR, ['h e', 'l l', 'he ll', 'hell o'])),
           ('tokenizer.ggml.bos_token_id', T_U32, len(toks) - 2), ('tokenizer.ggml.eos_token_id', T_U32, len(toks) - 2),
           ('tokenizer.ggml.add_bos_token', T_BOOL, 0)]
    put('gguf', 'gpt2-tokenizer.gguf', write_gguf(bpe, []))


def model_seeds():
    """fuzz_model: whole model files small enough to run — the embedded model's tokenizer cut to
    KEEP_TOKENS pieces, 2 layers of n_embd 32 (F16, Q8_0, Q4_0 weights), a PowerInfer layout
    (ffn_down_t, fc1 / fc2 predictors, magic PWRI) and a qwen2 with q/k/v biases, tied embeddings and
    byte-level BPE."""
    _, _, kvs, _ = read_gguf(os.path.join(ROOT, 'models', 'tiny-relu-llama-f16.gguf'))
    E, F, L, H, HK, D, V, R = 32, 64, 2, 4, 2, 8, KEEP_TOKENS, 16
    dims = {'context_length': 64, 'embedding_length': E, 'block_count': L, 'feed_forward_length': F,
            'attention.head_count': H, 'attention.head_count_kv': HK, 'attention.key_length': D,
            'attention.value_length': D, 'rope.dimension_count': D, 'vocab_size': V}

    def header(arch, tok_kvs):
        out = [('general.architecture', T_STR, arch), ('general.name', T_STR, 'fuzz-' + arch),
               ('general.alignment', T_U32, 32)]
        out += [('%s.%s' % (arch, k), T_U32, v) for k, v in dims.items()]
        out += [('%s.rope.freq_base' % arch, T_F32, 10000.0), ('%s.attention.layer_norm_rms_epsilon' % arch, T_F32, 1e-5)]
        return out + tok_kvs

    spm = []
    for k, t, v in kvs:
        if k.startswith('tokenizer.'):
            if t == T_ARR:
                v = (v[0], v[1][:V])
            spm.append((k, t, v))

    def layers(wt, pwri=False, bias=False):
        ts = []
        for il in range(L):
            b = 'blk.%d.' % il
            ts += [(b + 'attn_norm.weight', [E], 0), (b + 'attn_q.weight', [E, H * D], wt),
                   (b + 'attn_k.weight', [E, HK * D], wt), (b + 'attn_v.weight', [E, HK * D], wt),
                   (b + 'attn_output.weight', [H * D, E], wt), (b + 'ffn_norm.weight', [E], 0),
                   (b + 'ffn_gate.weight', [E, F], wt), (b + 'ffn_up.weight', [E, F], wt)]
            if bias:
                ts += [(b + 'attn_q.bias', [H * D], 0), (b + 'attn_k.bias', [HK * D], 0), (b + 'attn_v.bias', [HK * D], 0)]
            if pwri:
                ts += [(b + 'ffn_down_t.weight', [E, F], wt), (b + 'fc1.weight', [E, R], 1), (b + 'fc2.weight', [R, F], 1)]
            else:
                ts.append((b + 'ffn_down.weight', [F, E], wt))
        return ts

    relu = [('pinfer.ffn_activation', T_STR, 'relu')]
    for name, wt, fill in (('f16', 1, 0x3c), ('q8_0', 8, 0x21), ('q4_0', 2, 0x1b)):
        ts = [('token_embd.weight', [E, V], wt), ('output_norm.weight', [E], 0), ('output.weight', [E, V], wt)]
        put('model', 'llama-%s.gguf' % name, write_gguf(header('llama', spm) + relu, ts + layers(wt), fill=fill))
    ts = [('token_embd.weight', [E, V], 1), ('output_norm.weight', [E], 0), ('output.weight', [E, V], 1)]
    put('model', 'powerinfer.gguf', write_gguf(header('llama', spm) + relu, ts + layers(1, pwri=True), magic=b'PWRI'))
    sym = [bytes_to_unicode(b) for b in range(256)]
    toks = sym + ['he', 'll', 'hell', 'hello'] + ['<|x%d|>' % i for i in range(V - 262)] + ['<|endoftext|>', '<|im_start|>']
    bpe = [('tokenizer.ggml.model', T_STR, 'gpt2'), ('tokenizer.ggml.pre', T_STR, 'qwen2'),
           ('tokenizer.ggml.tokens', T_ARR, (T_STR, toks)),
           ('tokenizer.ggml.token_type', T_ARR, (T_I32, [1] * (V - 2) + [3, 3])),
           ('tokenizer.ggml.merges', T_ARR, (T_STR, ['h e', 'l l', 'he ll', 'hell o'])),
           ('tokenizer.ggml.bos_token_id', T_U32, V - 2), ('tokenizer.ggml.eos_token_id', T_U32, V - 2),
           ('tokenizer.ggml.add_bos_token', T_BOOL, 0)]
    ts = [('token_embd.weight', [E, V], 1), ('output_norm.weight', [E], 0)]
    put('model', 'qwen2-tied.gguf', write_gguf(header('qwen2', bpe), ts + layers(1, bias=True)))


def gpuidx_seeds():
    """fuzz_gpuidx: n_layer (1 byte), n_ff (u16), then an index file as PowerInfer writes it (engine/gpuidx.h):
    a split of 2 layers × 64 neurons, one layer with no GPU neuron (an empty bucket), and one with the
    1-element bucket earlier pinfer builds wrote."""
    L, F = 2, 64

    def index(rows, buckets, cap=1 << 30):
        kvs = [('general.architecture', T_STR, 'generic.gpu_index'), ('generic.gpu_index.block_count', T_U32, L),
               ('split.vram_capacity', T_U64, cap)]
        ts = []
        for il in range(L):
            ts += [('blk.%d.gpu_idx' % il, [F], 26), ('blk.%d.gpu_bucket' % il, [len(buckets[il])], 26)]
        raw = write_gguf(kvs, ts, magic=b'PWRI', fill=0)
        # the tensors' data: gpu_idx rows then buckets, each at its 32-byte aligned offset
        body = bytearray(raw)
        data_start = len(raw) - sum((4 * n + 31) // 32 * 32 for n in [F, len(buckets[0]), F, len(buckets[1])])
        off = data_start
        for il in range(L):
            for vals in (rows[il], buckets[il]):
                for i, v in enumerate(vals):
                    body[off + 4 * i:off + 4 * i + 4] = struct.pack('<i', v)
                off += (4 * len(vals) + 31) // 32 * 32
        return bytes([L - 1, (F - 1) & 0xff, (F - 1) >> 8]) + bytes(body)  # the target reads 1 + each

    half = [1 if i % 2 else 0 for i in range(F)]
    put('gpuidx', 'half.gpuidx', index([half, half], [[i for i in range(F) if i % 2]] * 2))
    put('gpuidx', 'empty-bucket.gpuidx', index([half, [0] * F], [[i for i in range(F) if i % 2], []]))
    put('gpuidx', 'one-elem-bucket.gpuidx', index([[0] * F, half], [[0], [i for i in range(F) if i % 2]]))


def bytes_to_unicode(b):
    printable = ord('!') <= b <= ord('~') or 0xa1 <= b <= 0xac or 0xae <= b <= 0xff
    if printable:
        return chr(b)
    n = sum(1 for c in range(b) if not (ord('!') <= c <= ord('~') or 0xa1 <= c <= 0xac or 0xae <= c <= 0xff))
    return chr(256 + n)


# ---------------------------------------------------------------- tokenizers
TEXTS = [
    b'Hello world', b' leading space', b'  two  spaces\tand\ttabs\n\nnewlines\r\n', b'hello 123 4567 89012',
    'caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001F600 \u2581 already'.encode(), b'invalid \xff\xfe utf-8 \xc3\x28 \xe2\x82',
    b'<s>bos</s><unk> <|im_start|>user\nhi<|im_end|><|endoftext|><my_tok>', b"it's they're we've I'm you'll he'd",
    b'', b'\x00embedded\x00nul', b'x' * 200,
]


def tok_seeds():
    corpus = os.path.join(SHARED, 'corpus', 'tinyshakespeare.txt')
    if os.path.exists(corpus):
        TEXTS.append(open(corpus, 'rb').read(600))
    for target, flag_sets in (('tok_spm', (0, 1, 2, 3)), ('tok_bpe', (0, 2, 8 | 1, 8 | 2, 16, 16 | 2, 24 | 3))):
        for i, t in enumerate(TEXTS):
            for fl in flag_sets:
                put(target, 'text%02d-f%02d' % (i, fl), bytes([fl]) + t)
        ids = struct.pack('<12i', 1, 2, 0, 3, 259, 300, 4095, 4096, -1, 2 ** 31 - 1, 260, 263)
        put(target, 'ids', bytes([4]) + ids)


# ---------------------------------------------------------------- supervisor commands
def sup_seeds():
    cmds = [
        {'cmd': 'status'}, {'cmd': 'stop'}, {'cmd': 'restart', 'stage': 'cpud'},
        {'cmd': 'restart', 'stage': 'gpud'}, {'cmd': 'release', 'slot': 3, 'id': 17},
        {'cmd': 'cancel', 'slot': 15, 'id': 1}, {'cmd': 'ticket', 'ticket': 9},
        {'cmd': 'generate', 'prompt': 'Once upon a time'},
        {'cmd': 'generate', 'prompt': 'The <s> king', 'n_predict': 16, 'temp': 0.7, 'top_k': 40, 'top_p': 0.9,
         'min_p': 0.05, 'repeat_penalty': 1.1, 'repeat_last_n': 64, 'seed': '18446744073709551615',
         'ignore_eos': True, 'dense': False, 'dump_logits': '/tmp/logits.f32', 'client_pid': 1234},
        {'cmd': 'generate', 'prompt': 'x', 'seed': 42, 'n_predict': -1, 'temp': 0},
        {'cmd': 'generate', 'prompt': 'word ' * 300},
        {'cmd': 'generate', 'prompt': '', 'temperature': 1},
    ]
    for i, c in enumerate(cmds):
        put('sup_cmd', 'cmd%02d.json' % i, json.dumps(c))
    put('sup_cmd', 'dup.json', '{"cmd":"status","cmd":"stop"}')
    put('sup_cmd', 'nul.json', b'{"cmd":"generate","prompt":"a\\u0000b"}')
    put('sup_cmd', 'array.json', '[1, 2, {"cmd": "status"}]')


# ---------------------------------------------------------------- apid's OpenAI request bodies
def api_seeds():
    """fuzz_api_request: one flags byte (bit 0 chat, the rest the template family), then the body."""
    chat = [
        {'model': 'tiny-relu-llama', 'messages': [{'role': 'system', 'content': 'Be brief.'},
                                                  {'role': 'user', 'content': 'Hello'}]},
        {'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': 'a'}, {'type': 'text', 'text': 'b'}]}],
         'stream': True, 'stream_options': {'include_usage': True}, 'logprobs': True, 'top_logprobs': 5,
         'max_completion_tokens': 16, 'stop': ['\n', 'END'], 'seed': -1, 'temperature': 0.7, 'top_p': 0.9},
        {'messages': [{'role': 'assistant', 'content': 'x'}, {'role': 'developer', 'content': ''}], 'n': 1,
         'tools': [], 'tool_choice': 'none', 'response_format': {'type': 'text'}, 'logit_bias': {}},
        {'messages': [{'role': 'tool', 'content': 'x'}]},
        {'messages': []},
    ]
    text = [
        {'model': 'alias', 'prompt': 'Once upon a time', 'max_tokens': 8, 'temperature': 0, 'top_k': 40,
         'min_p': 0.05, 'repeat_penalty': 1.1, 'presence_penalty': 0.5, 'frequency_penalty': -0.5,
         'ignore_eos': True, 'logprobs': 3, 'echo': False, 'best_of': 1, 'suffix': None},
        {'prompt': [1, 2, 3, 4095], 'stop': 'x'},
        {'prompt': [[5, 6]], 'max_tokens': 2000, 'logprobs': 1},
        {'prompt': ['one'], 'model': 'other'},
        {'prompt': ['one', 'two']},
    ]
    for i, b in enumerate(chat):
        put('api_request', 'chat%02d.json' % i, bytes([1 | (i << 1)]) + json.dumps(b).encode())
    for i, b in enumerate(text):
        put('api_request', 'text%02d.json' % i, bytes([0]) + json.dumps(b).encode())


# ---------------------------------------------------------------- HF files
def varint(b, pos):
    v = shift = 0
    while True:
        c = b[pos]
        pos += 1
        v |= (c & 0x7f) << shift
        shift += 7
        if not c & 0x80:
            return v, pos


def cut_spm_model(b, keep):
    """A SentencePiece ModelProto with only its first `keep` pieces (field 1); the trainer and
    normalizer specs are kept as they are."""
    out, pos, n = b'', 0, 0
    while pos < len(b):
        start = pos
        tag, pos = varint(b, pos)
        wire = tag & 7
        if wire == 2:
            ln, pos = varint(b, pos)
            pos += ln
        elif wire == 0:
            _, pos = varint(b, pos)
        elif wire == 5:
            pos += 4
        elif wire == 1:
            pos += 8
        else:
            raise ValueError('wire type %d' % wire)
        if tag >> 3 == 1:
            n += 1
            if n > keep:
                continue
        out += b[start:pos]
    return out


def hf_seeds():
    cfg_path = os.path.join(HF, 'config.json')
    if not os.path.exists(cfg_path):
        print('no %s: HF seeds skipped' % HF)
        return
    cfg_text = open(cfg_path, 'rb').read()
    cfg = json.loads(cfg_text)
    put('hf_config', 'tiny-config.json', cfg_text)
    q = dict(cfg, architectures=['Qwen2ForCausalLM'], hidden_act='silu', rope_theta=1e6, eos_token_id=[2, 3],
             use_sliding_window=False, tie_word_embeddings=True)
    del q['rope_parameters']
    del q['head_dim']
    put('hf_config', 'qwen2-config.json', json.dumps(q))
    put('hf_config', 'rope-scaling.json', json.dumps(dict(cfg, rope_scaling={'type': 'linear', 'factor': 2.0})))
    put('hf_config', 'minimal.json', json.dumps({k: cfg[k] for k in ('architectures', 'hidden_size', 'intermediate_size',
                                                                  'num_hidden_layers', 'num_attention_heads',
                                                                  'max_position_embeddings', 'vocab_size',
                                                                  'hidden_act')}))

    tj = json.load(open(os.path.join(HF, 'tokenizer.json'), encoding='utf-8'))
    tc = open(os.path.join(HF, 'tokenizer_config.json'), 'rb').read()
    spm = cut_spm_model(open(os.path.join(HF, 'tokenizer.model'), 'rb').read(), KEEP_TOKENS)
    # the reference model's files: SentencePiece (tokenizer.model), its tokenizer.json cut down
    cut = dict(tj)
    cut['model'] = dict(tj['model'], vocab=dict(list(tj['model']['vocab'].items())[:64]), merges=tj['model']['merges'][:32])
    tj_small = json.dumps(cut, ensure_ascii=False).encode()
    put('hf_tokenizer', 'tiny-spm', tj_small + SEP + tc + SEP + spm)
    put('hf_tokenizer', 'tiny-spm-no-json', SEP + tc + SEP + spm + SEP + b'{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}')
    # byte-level BPE tokenizer.json files, one per pre-tokenizer the converter names
    sym = [bytes_to_unicode(b) for b in range(256)]
    vocab = {s: i for i, s in enumerate(sym)}
    merges = []
    for a, b in (('h', 'e'), ('l', 'l'), ('he', 'll'), ('hell', 'o'), ('\u0120', 't'), ('\u0120t', 'he')):
        vocab[a + b] = len(vocab)
        merges.append('%s %s' % (a, b))
    added = [{'id': 300 + i, 'content': c, 'special': True} for i, c in enumerate(('<|endoftext|>', '<|im_start|>', '<|im_end|>'))]
    llama3 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
              "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    qwen2 = llama3.replace('\\p{N}{1,3}', '\\p{N}')
    split = lambda rx: {'type': 'Sequence', 'pretokenizers': [
        {'type': 'Split', 'pattern': {'Regex': rx}, 'behavior': 'Isolated', 'invert': False},
        {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True, 'use_regex': False}]}
    pres = {'gpt2': {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True, 'use_regex': True},
            'llama3': split(llama3), 'qwen2': split(qwen2)}
    bpe_cfg = json.dumps({'bos_token': '<|endoftext|>', 'eos_token': {'content': '<|im_end|>'}, 'add_bos_token': False,
                          'added_tokens_decoder': {'303': {'content': '<tool>', 'special': False}},
                          'chat_template': [{'name': 'default', 'template': '{{ messages }}'}]}).encode()
    for name, pre in pres.items():
        t = {'version': '1.0', 'added_tokens': added, 'pre_tokenizer': pre,
             'decoder': {'type': 'ByteLevel'},
             'model': {'type': 'BPE', 'vocab': vocab, 'merges': merges if name != 'qwen2' else [m.split(' ') for m in merges]}}
        put('hf_tokenizer', 'bpe-' + name, json.dumps(t, ensure_ascii=False).encode() + SEP + bpe_cfg)

    # safetensors: the reference checkpoint's header with every shape shrunk (data follows), and
    # the header as it is with no data (refused: offsets beyond the file)
    st = open(os.path.join(HF, 'model.safetensors'), 'rb')
    hlen = struct.unpack('<Q', st.read(8))[0]
    hdr_bytes = st.read(hlen)
    hdr = json.loads(hdr_bytes)
    put('safetensors', 'tiny-header-no-data', struct.pack('<Q', hlen) + hdr_bytes)
    off, small = 0, {}
    dsz = {'F32': 4, 'F16': 2, 'BF16': 2}
    for i, (name, e) in enumerate(hdr.items()):
        if name == '__metadata__':
            small[name] = e
            continue
        shape = [min(d, 3) for d in e['shape']]
        dtype = ('F32', 'F16', 'BF16')[i % 3] if e['dtype'] in dsz else e['dtype']
        n = dsz[dtype]
        for d in shape:
            n *= d
        small[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [off, off + n]}
        off += n
    h = json.dumps(small).encode()
    h += b' ' * ((-len(h)) % 8)
    data = bytes((i * 37) & 0xff for i in range(off))
    put('safetensors', 'tiny-shrunk', struct.pack('<Q', len(h)) + h + data)
    one = json.dumps({'w': {'dtype': 'BF16', 'shape': [], 'data_offsets': [0, 2]}, 'e': {'dtype': 'F32', 'shape': [0, 4],
                                                                                      'data_offsets': [2, 2]}}).encode()
    put('safetensors', 'scalar-and-empty', struct.pack('<Q', len(one)) + one + b'\x80\x3f')


if __name__ == '__main__':
    gguf_seeds()
    tok_seeds()
    sup_seeds()
    api_seeds()
    model_seeds()
    gpuidx_seeds()
    hf_seeds()
    total = 0
    for dp, _, fs in os.walk(os.path.join(ROOT, 'fuzz', 'corpus')):
        for f in fs:
            total += os.path.getsize(os.path.join(dp, f))
    print('corpus: %d bytes' % total)
