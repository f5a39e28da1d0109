"""A packed forward for BERT sequence classifiers: the HF model's function on real tokens only.

HF's ``BertForSequenceClassification`` runs every layer on the padded ``(batch, width)`` grid
and then reads one vector per row, the ``[CLS]`` token's, from the last layer. This forward
computes the same logits and loss with the model's own modules and weights, but:

- embeddings, projections, feed-forward blocks and layer norms run on the real tokens only,
  packed into one ``(tokens, hidden)`` matrix; only the attention product is padded, per row;
- the last layer computes queries, attention output and feed-forward for the ``[CLS]`` rows
  only (keys and values still cover every token), since nothing else reaches the pooler.

Gradients are the HF forward's (padding and the last layer's other positions never reach
the loss); only floating-point summation order and the dropout masks' random draws differ.
Rows must be right-padded, as :func:`~trial_executor.batches._batching.collate` pads them.

Projections that are plain ``nn.Linear`` modules run fused (one matmul for q, k and v); any
other module in their place (a ``peft`` LoRA layer) is called as a module, so its adapter
is part of the function. ``gradient_checkpointing`` recomputes each layer in the backward
pass (``torch.utils.checkpoint``, non-reentrant; dropout masks replayed).

On the CPU, the hidden-state dropout masks come from :func:`cpu_dropout` (two masks per
32-bit random draw) instead of ``bernoulli_``: torch draws CPU random numbers on one thread,
and drawing masks took a tenth of a bf16 training step. (The attention-probability dropout
stays inside ``scaled_dot_product_attention``: doing it by hand cost more in the backward
pass than it saved.)

The word-embedding gradient (vocabulary x hidden: 47 MB for all-MiniLM-L6-v2's
30,522 x 384) is added into ``weight.grad`` through a buffer this forward keeps between
steps (:class:`_WordEmbeddingLookup`): a new tensor of that size each step is a fresh
``mmap``, whose page faults cost about ten times what zeroing the resident buffer does.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import BertForSequenceClassification, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput

from trial_executor.batches import packing
from trial_executor.model._varlen import varlen_kernel


def supports_packed_forward(model: PreTrainedModel) -> bool:
    """Whether :class:`PackedBertClassifier` computes exactly what ``model``'s own forward does."""
    if not isinstance(model, BertForSequenceClassification):
        return False
    config = model.config
    return (
        not config.is_decoder
        and not getattr(config, "add_cross_attention", False)
        and not getattr(config, "chunk_size_feed_forward", 0)
        and getattr(config, "position_embedding_type", "absolute") == "absolute"
        and config.num_labels > 1
        and config.problem_type in (None, "single_label_classification")
        and model.bert.pooler is not None
    )


_MASK_LEVELS = 65536  # a mask element is one random 16-bit integer


def cpu_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Training-mode dropout with masks drawn two per 32-bit random integer (torch's CPU generator).

    Each element is kept with probability ``1 - round(p * 65536) / 65536`` (within 1e-5 of
    ``1 - p``) and scaled by exactly its inverse, so the output's expectation is ``x``. Takes about half
    the time of ``F.dropout`` on the CPU, where ``bernoulli_`` draws one number per element.
    """
    if p <= 0.0:
        return x
    dropped = round(p * _MASK_LEVELS)
    half = (x.numel() + 1) // 2
    bits = torch.randint(-(2**31), 2**31 - 1, (half,), dtype=torch.int32, device=x.device)
    keep = bits.view(torch.int16)[: x.numel()].view(x.shape) >= dropped - _MASK_LEVELS // 2
    # The scale as a Python number: a bf16 mask tensor would round it (1.1111 -> 1.1094).
    return x * keep * (_MASK_LEVELS / (_MASK_LEVELS - dropped))


def _dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    if not training or p <= 0.0:
        return x
    return cpu_dropout(x, p) if x.device.type == "cpu" else F.dropout(x, p, training=True)


class _WordEmbeddingLookup(torch.autograd.Function):
    """``F.embedding(ids, weight)`` whose backward adds into ``weight.grad`` via a reused buffer.

    Equal to autograd's own accumulation: when ``weight.grad`` is unset (``zero_grad``
    set it to ``None``), the zeroed buffer becomes ``weight.grad``; when set (accumulation
    steps), rows are added to it. The weight therefore gets no gradient through autograd's
    return path, so its gradient hooks do not run; nothing in the executor registers any.
    """

    @staticmethod
    def forward(
        ctx: Any, weight: torch.Tensor, ids: torch.Tensor, padding_idx: int | None, buffers: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.weight, ctx.padding_idx, ctx.buffers = weight, padding_idx, buffers
        return F.embedding(ids, weight, padding_idx)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, None, None]:
        (ids,) = ctx.saved_tensors
        if ctx.padding_idx is not None:  # nn.Embedding never updates the padding row
            grad = grad.masked_fill((ids == ctx.padding_idx).unsqueeze(-1), 0.0)
        weight: torch.Tensor = ctx.weight
        if weight.grad is None:
            buffer = ctx.buffers.get("grad")
            if buffer is None or buffer.shape != weight.shape or buffer.dtype != weight.dtype:
                buffer = ctx.buffers["grad"] = torch.zeros_like(weight)
            else:
                buffer.zero_()
            weight.grad = buffer
        weight.grad.index_add_(0, ids, grad.to(weight.grad.dtype))
        return None, None, None, None


def _project(h: torch.Tensor, modules: list[torch.nn.Module]) -> torch.Tensor:
    """``cat([m(h) for m in modules], dim=1)``: one fused matmul when all are plain ``nn.Linear``."""
    if all(type(m) is torch.nn.Linear for m in modules):
        return F.linear(h, torch.cat([m.weight for m in modules]), torch.cat([m.bias for m in modules]))
    return torch.cat([m(h) for m in modules], dim=1)


class PackedBertClassifier:
    """Call like the model: ``forward(input_ids=, attention_mask=, labels=None, token_type_ids=None)`` -> loss and logits.

    The packing tensors (``packed_index``, ``cls_index``, ``cu_seqlens``: see
    :func:`~trial_executor.batches._batching.packing`) come from collate, computed on the host; without
    them the forward computes them itself from ``attention_mask`` (which syncs a GPU: fine for
    evaluation and tests, never in the training step).

    ``varlen=True`` (CUDA, fp16/bf16 only) runs attention through FlashAttention's varlen kernel
    on the packed tokens instead of re-padding each layer into a grid. That kernel takes no
    dropout argument, so on that path attention probabilities are not dropped out (hidden-state
    dropout still is): BERT's ``attention_probs_dropout_prob`` (0.1) is then effectively 0. The
    decision: accept it for the speed where it measures faster, record it per trial
    (``TrialResult.varlen_attention``), and measure the accuracy effect on a GPU before it
    becomes a default (pending).
    """

    def __init__(
        self, model: BertForSequenceClassification, *, gradient_checkpointing: bool = False, varlen: bool = False,
        static_shapes: bool = False,
    ) -> None:
        if not supports_packed_forward(model):
            raise ValueError(f"{type(model).__name__} with this config has no packed forward")
        self.model = model
        self.gradient_checkpointing = gradient_checkpointing
        # Resolved here, not in the forward a compiled step traces (its first lookup imports a module).
        self._attend_varlen = varlen_kernel() if varlen else None
        self.varlen = self._attend_varlen is not None
        self.static_shapes = static_shapes
        self._embedding_grad: dict[str, torch.Tensor] = {}  # the reused word-embedding gradient buffer

    def _word_embeddings(self, ids: torch.Tensor) -> torch.Tensor:
        embedding = self.model.bert.embeddings.word_embeddings
        weight = embedding.weight
        plain = type(embedding) is torch.nn.Embedding and embedding.max_norm is None and not embedding.sparse
        if not (plain and weight.requires_grad and torch.is_grad_enabled()) or torch.compiler.is_compiling():
            return embedding(ids)
        return _WordEmbeddingLookup.apply(weight, ids, embedding.padding_idx, self._embedding_grad)

    def _embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None, keep: torch.Tensor, width: int) -> torch.Tensor:
        emb = self.model.bert.embeddings
        positions = keep % width
        # Same sum order as BertEmbeddings: word + token type + position.
        words = self._word_embeddings(input_ids.flatten().index_select(0, keep))
        if token_type_ids is None:
            h = words + emb.token_type_embeddings.weight[0]
        else:
            h = words + emb.token_type_embeddings(token_type_ids.flatten().index_select(0, keep))
        return _dropout(emb.LayerNorm(h + emb.position_embeddings(positions)), emb.dropout.p, self.model.training)

    def __call__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None, *, packed_index: torch.Tensor | None = None,
        cls_index: torch.Tensor | None = None, cu_seqlens: torch.Tensor | None = None,
    ) -> SequenceClassifierOutput:
        model, bert = self.model, self.model.bert
        batch, width = input_ids.shape
        if packed_index is None or cls_index is None or cu_seqlens is None:
            packed_index, cls_index, cu_seqlens = packing(attention_mask).values()
        if self.static_shapes:
            # Padding tokens of a static token bucket point at one slot past the grid (see _static):
            # their ids come from a padding id appended there, and the grid drops that slot.
            input_ids = F.pad(input_ids.flatten(), (0, 1)).view(1, -1)
            token_type_ids = None if token_type_ids is None else F.pad(token_type_ids.flatten(), (0, 1)).view(1, -1)
        h = self._embed(input_ids, token_type_ids, packed_index, width)
        varlen = self.varlen and h.is_cuda and torch.is_autocast_enabled("cuda")  # fp16/bf16 autocast
        # The key mask as an additive bias in the attention's dtype, made once per batch: a boolean
        # mask is converted inside every scaled_dot_product_attention call.
        dtype = torch.get_autocast_dtype(h.device.type) if torch.is_autocast_enabled(h.device.type) else h.dtype
        bias = torch.zeros(attention_mask.shape, dtype=dtype, device=h.device).masked_fill_(attention_mask == 0, float("-inf"))
        ctx = _Context(
            batch, width, packed_index, cls_index, bias[:, None, None, :], cu_seqlens, model.training, varlen,
            torch.arange(batch + 1, dtype=torch.int32, device=h.device) if varlen else None,
        )
        layers = bert.encoder.layer
        recompute = self.gradient_checkpointing and model.training and torch.is_grad_enabled()
        for i, layer in enumerate(layers):
            last = i == len(layers) - 1
            h = checkpoint(self._layer, h, layer, last, ctx, use_reentrant=False) if recompute else self._layer(h, layer, last, ctx)

        pooled = bert.pooler.activation(bert.pooler.dense(h))
        logits = model.classifier(_dropout(pooled, model.dropout.p, model.training))
        loss = F.cross_entropy(logits.view(-1, model.num_labels), labels.view(-1)) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits)

    def _grid(self, x: torch.Tensor, ctx: _Context, parts: int, heads: int, head_dim: int) -> torch.Tensor:
        # (tokens, parts*hidden) -> (parts, batch, heads, width, head_dim), zeros at padding.
        cells = ctx.batch * ctx.width
        # Static shapes: one spare row takes the padding segment's tokens, cut off by [:cells]. An int,
        # not the bool: dynamo on torch 2.11 fails on a symbolic size plus a bool (sympy's BooleanFalse).
        spare = 1 if self.static_shapes else 0
        full = x.new_zeros(cells + spare, x.shape[1]).index_copy(0, ctx.keep, x)[:cells]
        return full.view(ctx.batch, ctx.width, parts, heads, head_dim).permute(2, 0, 3, 1, 4)

    def _layer(self, h: torch.Tensor, layer: torch.nn.Module, last: bool, ctx: _Context) -> torch.Tensor:
        sa = layer.attention.self
        heads, head_dim, batch = sa.num_attention_heads, sa.attention_head_size, ctx.batch
        dropout = sa.dropout.p if ctx.training else 0.0
        if ctx.varlen:
            attend_varlen = self._attend_varlen
            assert attend_varlen is not None  # ctx.varlen only where self.varlen
            # Static shapes: the padding tokens are one more segment; any segment fits in all the tokens.
            longest = h.shape[0] if self.static_shapes else ctx.width
            if not last:
                q, k, v = _project(h, [sa.query, sa.key, sa.value]).view(-1, 3, heads, head_dim).unbind(1)
                out = attend_varlen(q, k, v, ctx.cu_seqlens, ctx.cu_seqlens, longest, longest, sa.scaling)
            else:
                k, v = _project(h, [sa.key, sa.value]).view(-1, 2, heads, head_dim).unbind(1)
                h = h.index_select(0, ctx.cls)
                q = sa.query(h).view(batch, heads, head_dim)
                out = attend_varlen(q, k, v, ctx.one_per_row, ctx.cu_seqlens[: batch + 1], 1, longest, sa.scaling)
        elif not last:
            q, k, v = self._grid(_project(h, [sa.query, sa.key, sa.value]), ctx, 3, heads, head_dim)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=ctx.key_bias, dropout_p=dropout, scale=sa.scaling)
            out = out.transpose(1, 2).reshape(batch * ctx.width, -1)
            if torch.compiler.is_compiling() and out.device.type == "cpu":
                # The backward of a half-precision gather is an index_add the CPU compiler cannot
                # lower (no half atomic add): a float32 gather keeps bf16 at fp32's op count.
                out = out.float()
            out = (F.pad(out, (0, 0, 0, 1)) if self.static_shapes else out).index_select(0, ctx.keep)
        else:
            # Only the [CLS] rows reach the pooler: one query per row over all keys.
            k, v = self._grid(_project(h, [sa.key, sa.value]), ctx, 2, heads, head_dim)
            h = h.index_select(0, ctx.cls)
            q = sa.query(h).view(batch, heads, 1, head_dim)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=ctx.key_bias, dropout_p=dropout, scale=sa.scaling)
            out = out.reshape(batch, -1)
        # BertSelfOutput and BertOutput, with this module's dropout: dense, dropout, residual, norm.
        so, fo = layer.attention.output, layer.output
        attended = so.LayerNorm(_dropout(so.dense(out), so.dropout.p, ctx.training) + h)
        return fo.LayerNorm(_dropout(fo.dense(layer.intermediate(attended)), fo.dropout.p, ctx.training) + attended)


class _Context(NamedTuple):
    """One batch's packing, shared by every layer."""

    batch: int
    width: int
    keep: torch.Tensor  # packed position -> grid position
    cls: torch.Tensor  # each row's [CLS] packed position
    key_bias: torch.Tensor  # (batch, 1, 1, width): 0 for tokens, -inf for padding
    cu_seqlens: torch.Tensor
    training: bool
    varlen: bool
    one_per_row: torch.Tensor | None
