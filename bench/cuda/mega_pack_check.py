# Emulates mega_probe.cu's packing (pack_kernel, packed_stage) and every consumer shared-memory read address
# for stages of one or two slices, and checks that lane (g, t) of warp w reads the weights linear.cu's
# lane reads for the same chunk (element indices, no data). Run: python3 bench/cuda/mega_pack_check.py
kSlices=8; kCWarps=8; kStageK=512
def check(kSW, k, inter=0, tiles=3):
    kOwners=kCWarps//kSW; kRowBytes=kSW*kStageK*2; kStageBytes=16*kRowBytes
    stages=k//kStageK//kSW; parts=k//kSlices//kStageK
    kUnits=kStageK//8
    def packed_stage(s): return (s%kOwners)*parts + s//kOwners
    # pack: wp[elem] = (src_row, src_k)
    wp={}
    for tile in range(tiles):
        for ps in range(stages):
            stage=tile*stages+ps; owner=ps//parts; part=ps%parts
            for u in range(16*kSW*kUnits):
                r=u//(kSW*kUnits); sub=u%(kSW*kUnits)//kUnits; cu=u%kUnits
                src_unit = (cu^4) if (r&1) else cu
                sl=owner*kSW+sub
                src_row = (8*tile+r if r<8 else inter+8*tile+r-8) if inter>0 else tile*16+r
                for e in range(8):
                    wp[stage*(kStageBytes//2) + r*(kRowBytes//2) + sub*kStageK + cu*8 + e] = (src_row, (sl*parts+part)*kStageK + src_unit*8 + e)
    assert len(wp)==tiles*16*k
    # consumer: producer sends position s of tile -> src stage (tile*stages + packed_stage(s)); warp w reads
    for tile in range(tiles):
        for w in range(kCWarps):
            owner=w//kSW; half=w%kSW
            chunk_list=[]
            for part in range(parts):
                s = part*kOwners + owner
                stage = tile*stages + packed_stage(s)
                for c in range(kStageK//32):
                    for g in range(8):
                        for t in range(4):
                            swz=(g&1)*64
                            for row in (g, g+8):
                                byte = half*(kStageK*2) + 16*t + row*kRowBytes + ((c*64)^swz)
                                base_el = stage*(kStageBytes//2) + byte//2
                                got=[wp[base_el+e] for e in range(8)]
                                # expected: linear.cu lane (g,t) chunk C of slice w: W[n0+row][C*32 + 8t .. +8]
                                C = (w*parts+part)*(kStageK//32) + c   # global chunk index
                                exp_row = (8*tile+row if row<8 else inter+8*tile+row-8) if inter>0 else tile*16+row
                                exp=[(exp_row, C*32+8*t+e) for e in range(8)]
                                assert got==exp, (kSW,k,tile,w,part,c,g,t,row,got[:2],exp[:2])
                # slice w's chunks in order: chunk C ranges contiguous per warp
            # x offset: xb = (w*spw + part)*kStageK -> the chunk C*32 above: consistent by construction
    print("ok", kSW, k, inter)
for kSW in (1,2):
    for k in (4096, 12288):
        check(kSW,k)
    check(kSW,4096,inter=24)


def check_q4(k, inter=0, tiles=3):
    # TF_MEGA_Q4: a stage = piece p of slices 0..7 (lane-major 4-bit words, 256 bytes a piece a row) + group words.
    kRowBytes = 8 * kStageK // 2
    kScaleRow = 8 * kStageK // 64 * 4
    kStageBytes = 16 * kRowBytes + 16 * kScaleRow
    parts = k // kSlices // kStageK
    groups = k // 64

    def word_of(c, t):  # quant_common.cuh: every chunk of these K is in a quad
        return (c >> 2) * 16 + t * 4 + (c & 3)

    def src_row_of(tile, r):
        return (8 * tile + r if r < 8 else inter + 8 * tile + r - 8) if inter > 0 else tile * 16 + r

    wp = {}  # byte offset of a 4-byte word in the packed buffer -> ('w', row, word index) or ('s', row, group)
    for tile in range(tiles):
        for part in range(parts):
            stage = tile * parts + part
            dst = stage * kStageBytes
            for u in range(16 * (kRowBytes // 16)):
                r, cu = divmod(u, kRowBytes // 16)
                sl, qu = divmod(cu, kStageK // 32)
                src_qu = (qu ^ 4) if (r & 1) else qu
                c0 = (sl * parts + part) * (kStageK // 32)
                for e in range(4):  # the 4 words of the 16-byte unit
                    src_byte = c0 * 16 + src_qu * 16 + 4 * e
                    wp[dst + r * kRowBytes + cu * 16 + 4 * e] = ('w', src_row_of(tile, r), src_byte // 4)
            for u in range(16 * 64):
                r, wi = divmod(u, 64)
                sl, gi = divmod(wi, 8)
                g0 = (sl * parts + part) * (kStageK // 64)
                wp[dst + 16 * kRowBytes + r * kScaleRow + ((wi + r) & 63) * 4] = ('s', src_row_of(tile, r), g0 + gi)
    for tile in range(tiles):
        for w in range(8):
            for part in range(parts):
                sb = (tile * parts + part) * kStageBytes  # the consumer's stage (position part of the tile)
                for g in range(8):
                    for t in range(4):
                        swz = (g & 1) * 64
                        for qd in range(kStageK // 128):
                            for e in range(4):
                                c = qd * 4 + e
                                C = (w * parts + part) * (kStageK // 32) + c  # global chunk
                                for row, off in ((g, 0), (g + 8, 8)):
                                    wa = sb + (g + off) * kRowBytes + w * (kStageK // 2) + 16 * t + ((qd * 64) ^ swz) + 4 * e
                                    assert wp[wa] == ('w', src_row_of(tile, row), word_of(C, t)), (k, tile, w, part, g, t, qd, e)
                                    wi = w * (kStageK // 64) + c // 2
                                    sa = sb + 16 * kRowBytes + (g + off) * kScaleRow + ((wi + g + off) & 63) * 4
                                    assert wp[sa] == ('s', src_row_of(tile, row), C // 2), (k, tile, w, part, g, t, c)
    print("ok q4", k, inter)


for k in (4096, 12288):
    check_q4(k)
check_q4(4096, inter=24)
