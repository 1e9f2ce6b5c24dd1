"""Attention over whole 16-column blocks: a text's answer that does not depend on the width of its batch.

OpenVINO's CPU kernels reduce over the key axis in blocks of 16 floats (AVX-512's width; AVX2's 8 divides it) and
treat a last, partial block apart.  The attention Softmax and the context MatMul (probabilities x V) reduce over
that axis, which is the padded width of the batch: a text whose tokens reach into the partial block is rounded
otherwise than in a wider batch, by 1e-7, and the next layer's FakeQuantize can make a whole quantization step of
it (CLUENER's INT8: 4 of 300 texts moved, up to 0.057; one served answer of 1,343 differed from the offline one).
At widths that are multiples of 16 every text's outputs are identical (MEASUREMENTS.md, OpenVINO).

So each attention block's keys, values and additive mask are padded, inside the model, to the next multiple of 16:
the extra keys are masked (a large negative score, exp gives exactly 0) and their values are multiplied by that 0,
so the outputs are those the same text has in any batch padded to a multiple of 16, at every width.  Only the key
axis of the attention is padded, not the batch: the projections and the feed-forward layers, most of the time, run
on the batch's own width (padding the whole batch to a multiple of 16 cost 1.15-1.24x at 16 rows).  Such an IR is
exact with the CPU plugin's generated attention kernels too ("snippets", which round by the padded width on an
unpadded IR), so it is compiled with them: 1.00-1.07x the unpadded IR's time without them at 4-64 rows, ~1.1x at one
(Zen 4; measured there only: ``make smoke --concurrency`` checks served == offline on the serving CPU).

The pattern is the encoder's self-attention as paddle2onnx writes it and NNCF leaves it: ``MatMul(Q, K) -> [Multiply
by a constant] -> Add(mask) -> Softmax -> MatMul(probabilities, V)``, K and V reached from their ``[batch, width,
hidden]`` projections through Reshape / Transpose / FakeQuantize.  A model without that pattern is left as it is
(``pad_attention`` returns 0, and ``quantize.build`` refuses a width-independent build of it in one line).
"""

from __future__ import annotations

BLOCK = 16  # columns: AVX-512's 16 floats; a multiple of AVX2's 8
# The score a padded key gets: exp(score - max) is exactly 0 in float32 below about -104.
MASKED = -1e9
_LAYOUT = ("Reshape", "Transpose", "FakeQuantize")  # between a projection and the MatMul that reads it
_SCALE = ("Multiply", "Divide")  # the scores' 1/sqrt(d), when it follows the score MatMul


def pad_attention(model, block: int = BLOCK) -> int:
    """Rewrite ``model`` (an ``openvino.Model``, in place) so that every attention block matching the pattern reduces
    over whole ``block``-column blocks.  Returns how many blocks were rewritten (0: nothing matched, unchanged)."""
    blocks = [b for b in (_attention(node) for node in model.get_ordered_ops() if node.get_type_name() == "Softmax") if b]
    padded: dict = {}  # one Pad per tensor, shared by every block that reads it (the mask: all of them)
    for mask_add, mask_input, projections in blocks:
        amount = _amount(mask_add.input_value(mask_input), block, padded)
        _replace(mask_add.input(mask_input), amount, -1, MASKED, padded)
        for target in projections:  # K's and V's [batch, width, hidden]: the width is axis 1
            _replace(target, amount, 1, 0.0, padded)
    if blocks:
        model.validate_nodes_and_infer_types()
    return len(blocks)


def _attention(softmax):
    """(the Add of the mask, which of its inputs is the mask, the inputs reading K's and V's projections) for a Softmax
    over the last axis in the pattern; None otherwise."""
    rank = softmax.get_output_partial_shape(0).rank
    axis = softmax.get_attributes().get("axis")
    if rank.is_dynamic or axis not in (-1, rank.get_length() - 1):
        return None
    add = softmax.input_value(0).get_node()
    if add.get_type_name() != "Add":
        return None
    found = [(i, m) for i in range(2) if (m := _score_matmul(add.input_value(i).get_node())) is not None]
    if len(found) != 1 or add.input_value(1 - found[0][0]).get_partial_shape().rank != rank:  # a [.., 1, width] mask
        return None
    scores, score_matmul = found[0]
    consumers = list(softmax.output(0).get_target_inputs())
    context = consumers[0].get_node() if len(consumers) == 1 else None
    while context is not None and context.get_type_name() == "FakeQuantize":  # the probabilities' quantizer
        consumers = list(context.output(0).get_target_inputs())
        context = consumers[0].get_node() if len(consumers) == 1 else None
    if context is None or context.get_type_name() != "MatMul" or consumers[0].get_index() != 0:
        return None
    projections = (_projection(score_matmul.input(1)), _projection(context.input(1)))
    if None in projections:
        return None
    return add, 1 - scores, projections


def _score_matmul(node):
    if node.get_type_name() in _SCALE and any(v.get_node().get_type_name() == "Constant" for v in node.input_values()):
        node = next(v.get_node() for v in node.input_values() if v.get_node().get_type_name() != "Constant")
    return node if node.get_type_name() == "MatMul" else None


def _projection(matmul_input):
    """The input to rewrite: the first layout node's, reading the ``[batch, width, hidden]`` projection; None when
    the MatMul's operand is not reached that way."""
    target = matmul_input
    while target.get_source_output().get_node().get_type_name() in _LAYOUT:
        target = target.get_source_output().get_node().input(0)
    shape = target.get_source_output().get_partial_shape()
    return target if shape.rank.is_static and shape.rank.get_length() == 3 else None


def _amount(mask, block: int, cache: dict):
    """How many columns make the mask's last axis (the padded width) a multiple of ``block``: (block - W % block) %
    block, computed once per model from the mask every block shares."""
    import openvino as ov
    import openvino.opset13 as ops

    key = ("amount", mask.get_node().get_friendly_name(), mask.get_index())
    if key not in cache:
        width = ops.gather(ops.shape_of(mask, "i64"), ops.constant([-1], ov.Type.i64), ops.constant(0, ov.Type.i64))
        b = ops.constant([block], ov.Type.i64)
        cache[key] = ops.floor_mod(ops.subtract(b, ops.floor_mod(width, b)), b).output(0)
    return cache[key]


def _replace(target, amount, axis: int, value: float, cache: dict) -> None:
    """Feed ``target`` (a node's input) its source padded at the end of ``axis`` by ``amount`` with ``value``."""
    import openvino as ov
    import openvino.opset13 as ops

    source = target.get_source_output()
    key = (source.get_node().get_friendly_name(), source.get_index())
    if key not in cache:
        rank = source.get_partial_shape().rank.get_length()
        axis %= rank
        zeros = lambda n: ops.constant([0] * n, ov.Type.i64)  # noqa: E731
        if ("end", rank, axis) not in cache:  # one pads vector per layout: every call pays for each node it runs
            cache[("end", rank, axis)] = ops.concat([z for z in (zeros(axis) if axis else None, amount,
                                                     zeros(rank - axis - 1) if rank - axis - 1 else None) if z is not None], 0)
        end = cache[("end", rank, axis)]
        cache[key] = ops.pad(source, zeros(rank), end, "constant", ops.constant(value, source.get_element_type())).output(0)
    target.replace_source_output(cache[key])
