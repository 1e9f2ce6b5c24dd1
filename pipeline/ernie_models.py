"""The ERNIE networks every task kind builds (PaddleNLP's heads), whose layers may have fewer attention heads and
FFN neurons than stock ERNIE allows.  ``pipeline.modeling`` reads, loads and saves model directories with them;
``pipeline.compress.dynabert`` prunes them.

Why a class of our own: paddle's ``nn.MultiHeadAttention`` derives ``head_dim = embed_dim // num_heads``
and builds q/k/v/out projections ``embed_dim`` wide, so a stock PaddleNLP ERNIE cannot express "9 heads
of 64 with hidden size 768" (q/k/v 576 wide).  DynaBERT's width pruning needs exactly that: heads are
removed whole and the kept ones keep their size.  (Upstream PaddleNLP only ever exported such models as
static graphs, by mutating the layers; its pruned *dygraph* directory cannot be reloaded.)

The smallest design that still saves and loads as a PaddleNLP ERNIE directory: ``config.json`` is the
ordinary ERNIE config with the smaller ``num_attention_heads`` and ``intermediate_size`` plus one extra
key, ``attention_head_size`` (the kept head width).  This subclass builds the stock network with the
original head count and then narrows each attention's projections; parameter names and the state-dict
layout are exactly ERNIE's, so ``from_pretrained``/``save_pretrained``, ``paddle.jit.save`` and
paddle2onnx see a normal ERNIE.  Paddle's attention forward only uses ``num_heads`` and ``head_dim``,
which stay consistent after narrowing.  For a config without the extra key this class *is* the stock
classifier, so a loader can use it for every model.

The intermediate size needs nothing special (stock ERNIE reads it from the config).
"""

from __future__ import annotations

import copy
import types
from types import SimpleNamespace

import paddle
from paddlenlp.transformers import ErnieForQuestionAnswering as _StockErnieForQuestionAnswering
from paddlenlp.transformers import ErnieForSequenceClassification as _StockErnieForSequenceClassification
from paddlenlp.transformers import ErnieForTokenClassification as _StockErnieForTokenClassification

HEAD_SIZE_KEY = "attention_head_size"


def narrow_attention(attn, num_heads: int) -> None:
    """Keep the first ``num_heads`` heads of a ``paddle.nn.MultiHeadAttention``, physically (in place)."""
    import paddle

    if not 1 <= num_heads <= attn.num_heads:
        raise ValueError(f"cannot keep {num_heads} of {attn.num_heads} attention heads")
    width = num_heads * attn.head_dim
    for name in ("q_proj", "k_proj", "v_proj"):
        old = getattr(attn, name)
        new = paddle.nn.Linear(old.weight.shape[0], width)
        new.weight.set_value(old.weight[:, :width])
        new.bias.set_value(old.bias[:width])
        setattr(attn, name, new)
    old = attn.out_proj
    new = paddle.nn.Linear(width, old.weight.shape[1])
    new.weight.set_value(old.weight[:width, :])
    new.bias.set_value(old.bias)
    attn.out_proj = new
    attn.num_heads = num_heads  # head_dim is unchanged: each kept head keeps its width


def narrow_ffn(layer, neurons: int) -> None:
    """Keep the first ``neurons`` FFN neurons of a ``paddle.nn.TransformerEncoderLayer`` (in place)."""
    import paddle

    inner = layer.linear1.weight.shape[1]
    if not 1 <= neurons <= inner:
        raise ValueError(f"cannot keep {neurons} of {inner} FFN neurons")
    old1, old2 = layer.linear1, layer.linear2
    new1 = paddle.nn.Linear(old1.weight.shape[0], neurons)
    new1.weight.set_value(old1.weight[:, :neurons])
    new1.bias.set_value(old1.bias[:neurons])
    new2 = paddle.nn.Linear(neurons, old2.weight.shape[1])
    new2.weight.set_value(old2.weight[:neurons, :])
    new2.bias.set_value(old2.bias)
    layer.linear1, layer.linear2 = new1, new2


def _init_narrowed(self, stock_cls, config) -> None:
    """``stock_cls.__init__`` for ``config``, then heads narrowed when config has ``attention_head_size``."""
    head_size = getattr(config, HEAD_SIZE_KEY, None)
    if not head_size or int(head_size) * config.num_attention_heads == config.hidden_size:
        stock_cls.__init__(self, config)
        configure_layer_norms(self, config)
        return
    head_size = int(head_size)
    if config.hidden_size % head_size:
        raise ValueError(f"config: hidden_size {config.hidden_size} is not a multiple of {HEAD_SIZE_KEY} {head_size}")
    kept = config.num_attention_heads
    full = copy.deepcopy(config)
    full.num_attention_heads = config.hidden_size // head_size
    if kept > full.num_attention_heads:
        raise ValueError(f"config: num_attention_heads {kept} x {HEAD_SIZE_KEY} {head_size} exceeds hidden_size")
    stock_cls.__init__(self, full)
    for layer in self.ernie.encoder.layers:
        narrow_attention(layer.self_attn, kept)
    # save_pretrained writes self.config: it must say what the network now is.
    self.config = config
    self.ernie.config = config
    configure_layer_norms(self, config)


def configure_layer_norms(model, config) -> None:
    """Every LayerNorm's epsilon from the config's ``layer_norm_eps``.  PaddleNLP's ERNIE sets 1e-12 whatever the
    config says (its inner ``ErnieModel``'s init hook), which is BERT's value but not ERNIE 3.0's (1e-5, as
    Hugging Face's ERNIE ports say): a model imported from HF (``pipeline.hf_import``) must compute what HF
    computes.  PaddleNLP directories say 1e-12 (its config default), so nothing changes for them.  Set after the
    layers' own init, which marks them initialized, so the outer model's init pass leaves them as set."""
    import paddle

    eps = float(getattr(config, "layer_norm_eps", None) or 1e-12)
    for layer in model.sublayers():
        if isinstance(layer, paddle.nn.LayerNorm):
            layer._epsilon = eps


class ErnieForSequenceClassification(_StockErnieForSequenceClassification):
    """PaddleNLP's ERNIE classifier, plus head-pruned attention when config has ``attention_head_size``."""

    def __init__(self, config):
        _init_narrowed(self, _StockErnieForSequenceClassification, config)


class ErnieForTokenClassification(_StockErnieForTokenClassification):
    """PaddleNLP's ERNIE token classifier (logits [B, T, num_tags]), head-prunable like the above."""

    def __init__(self, config):
        _init_narrowed(self, _StockErnieForTokenClassification, config)


class ErnieForQuestionAnswering(_StockErnieForQuestionAnswering):
    """PaddleNLP's ERNIE span extractor with ONE output, ``logits`` [B, T, 2] (start, end).

    One output keeps every backend session, the exporters and the served model the same for all task
    kinds; with ``return_dict`` it returns ``.logits`` and ``.hidden_states`` (DynaBERT distillation).
    """

    def __init__(self, config):
        _init_narrowed(self, _StockErnieForQuestionAnswering, config)

    def forward(self, input_ids, token_type_ids=None, position_ids=None, attention_mask=None,
                output_hidden_states=False, return_dict=False):
        # Stock forward = classifier over the sequence output, then split into start/end; not splitting
        # gives [B, T, 2] directly.  (No super(): paddle's dy2static cannot convert it.)
        out = self.ernie(input_ids, token_type_ids=token_type_ids, position_ids=position_ids,
                         attention_mask=attention_mask, output_hidden_states=output_hidden_states, return_dict=True)
        logits = self.classifier(out.last_hidden_state)
        if return_dict:
            return SimpleNamespace(logits=logits, hidden_states=out.hidden_states)
        return logits


class ErnieForUIE(ErnieForQuestionAnswering):
    """UIE's span extractor, ``logits`` [B, T, 2] (start, end) BEFORE the sigmoid: the network of PaddleNLP's
    ``UIE`` (two ``Linear(hidden, 1)`` heads are one ``Linear(hidden, 2)``; ``pipeline.extraction.checkpoint``
    converts its checkpoints), with the sigmoid applied where spans are decoded.  Its own name so a
    reading-comprehension model (softmax over positions) is never taken for it, or the reverse."""


def first_token_only(model) -> bool:
    """Make a sequence classifier's last encoder layer compute the first token's row only (in place), for export.

    Its head reads the pooled first token and nothing else, so in the last layer every other row's query, attention
    output, residual and feed-forward work is thrown away: only the keys and values need every token.  Cutting the
    query to the first row leaves the logits what they were (the same arithmetic on that row) and drops about
    five-sixths of one layer's work: 1.14-1.15x the speed of a 6-layer TNEWS model, FP32 and INT8 alike
    (MEASUREMENTS.md, "The last layer").  Returns whether it applied: False for the token-level heads, which read
    every row, and for a pre-norm encoder, whose layer this forward does not describe."""
    if not isinstance(model, _StockErnieForSequenceClassification):
        return False
    last = model.ernie.encoder.layers[-1]
    if last.normalize_before:
        return False
    last.forward = types.MethodType(_first_token_forward, last)
    return True


@paddle.jit.not_to_static  # as PaddleNLP's own layer forward: run as written when saved
def _first_token_forward(self, src, src_mask=None, cache=None, output_attentions=False):
    """PaddleNLP's post-norm encoder layer (``paddlenlp.transformers.model_outputs._transformer_encoder_layer_fwd``)
    for the first row's query alone: attention over every key, then the residual, norms and feed-forward of that row."""
    first = src[:, :1]
    attended = self.self_attn(first, src, src, src_mask)
    out = self.norm1(first + self.dropout1(attended))
    return self.norm2(out + self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(out))))))


ARCHITECTURES = {
    "ErnieForSequenceClassification": ErnieForSequenceClassification,
    "ErnieForTokenClassification": ErnieForTokenClassification,
    "ErnieForQuestionAnswering": ErnieForQuestionAnswering,
    "ErnieForUIE": ErnieForUIE,
}


def prune_config(config, num_heads: int, intermediate_size: int):
    """A copy of an ERNIE config describing ``num_heads`` heads (of the original width) and a narrower FFN."""
    head_size = int(getattr(config, HEAD_SIZE_KEY, None) or config.hidden_size // config.num_attention_heads)
    out = copy.deepcopy(config)
    out.num_attention_heads = num_heads
    out.intermediate_size = intermediate_size
    setattr(out, HEAD_SIZE_KEY, head_size)
    return out

