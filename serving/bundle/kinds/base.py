"""What a bundle is made of, per task kind: the base every kind's object extends (``BundleKind``; ``WindowedKind``
for the kinds whose items become windows).  Each kind's object is the ``KIND`` of ``serving/kinds/<kind>/bundle.py``;
what a kind object answers:

    models                                its python models and helpers: serving/kinds/<kind>/models/
    files                                 a ``PythonModels``: the python models of <task>_tokenizer / _postprocess
                                          and of layout fused (in ``models``), and the pipeline's pure modules
                                          copied beside them (served == offline code)
    fused_model(pc)                       the one python model of layout fused for these settings (None: the kind
                                          has no fused form, and is not ``fusable``)
    tokenizer_helpers(pc), postprocess_helpers(pc)   helpers copied beside the pre- / post-processing model
    layout(pc)                            ensemble or fused, for these package settings
    one_model(pc)                         FastDeploy's uie: one python model runs all three steps
    label_problem(rows)                   what is wrong with labels.json's rows for this kind (None: nothing)
    serving_defaults(pc)                  instances x threads where make tune has not measured the bundle here
    meta_section, meta_problem(meta)      meta.json's section of its windowing / decoding settings (reading, uie), and
                                          what is wrong with it
    fastdeploy                            FastDeploy's serving example for the kind (package.api fastdeploy), or None
    shape_fields(meta), meta_sections(meta)   what of it goes into the Triton configs and into bundle.json
    configs(shape, pc)                    its Triton model configs (``all_configs``: by model name)
    card_lines, fastdeploy_card_lines     the model card's "What it is" lines; describes, unit, client_example

A ``WindowedKind`` (reading comprehension, UIE) declares what differs between such kinds and builds the rest from it:
its ensemble's string ``inputs`` (the first segment's, then the context's), those the post-processing reads too
(``to_post``), its ``outputs``, its decoding settings (``decode_params``), the request checks its models share
(``requests_helper``) and its model card's words (``card``: a ``WindowedCard``).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.contract import TaskKind
from serving.bundle import fastdeploy_api as fd
from serving.bundle import model_config as mcfg
from serving.bundle.config import PackageConfig
from serving.bundle.model_config import BundleShape, ModelNames
from serving.triton import fastdeploy_payloads


@dataclasses.dataclass(frozen=True)
class PythonModels:
    """A kind's python models (files in its ``models`` folder) and the pipeline modules that travel with them."""

    tokenizer: str  # <task>_tokenizer's model.py
    postprocess: str  # <task>_postprocess's model.py
    fused: str | None = None  # layout fused's one model.py (None: the kind has no fused form)
    # pipeline modules (stdlib + numpy [+ tokenizers] only), relative to pipeline/, copied verbatim next to the
    # (tokenizer, postprocess) models; the python models load them with model_support.sibling()
    tokenizer_pure: tuple[str, ...] = ("wordpiece.py",)
    postprocess_pure: tuple[str, ...] = ()


class BundleKind:
    """Base: what every kind shares unless it says otherwise (JSON label rows, no fused layout)."""

    kind: TaskKind
    files: PythonModels
    meta_section: str | None = None  # meta.json's section of this kind's windowing / decoding settings
    fastdeploy: fd.Example | None = None  # FastDeploy's serving example for this kind (None: it has none)
    token_level: bool = True  # the model's logits are per token ([T, C]), not per text ([C])
    # model card
    describes: str = ""
    unit: str = "logits per token"
    client_example: str = ""
    post_steps: str = ""  # what the post-processing does, for a fused bundle's card ("softmax")

    @property
    def name(self) -> str:
        return self.kind.value

    @property
    def models(self) -> Path:
        """Its python models and their helpers: ``models/`` beside the module that defines the kind's class
        (serving/kinds/<kind>/bundle.py)."""
        return Path(inspect.getfile(type(self))).resolve().parent / "models"

    # -- layout ---------------------------------------------------------------------------------------------------
    def served_name(self, task: str, pc: PackageConfig) -> str:
        """The name clients call: the task's with our API, FastDeploy's example name with theirs."""
        return self.fastdeploy.model if pc.api == fd.API and self.fastdeploy is not None else task

    def one_model(self, pc: PackageConfig) -> bool:
        """package.api fastdeploy with a kind FastDeploy serves as one python model (its uie)."""
        return pc.api == fd.API and self.fastdeploy is not None and self.fastdeploy.one_model

    @property
    def fusable(self) -> bool:
        """Layout auto is fused on a python runtime: the kind has one python model for its three steps."""
        return self.files.fused is not None

    def layout(self, pc: PackageConfig) -> str:
        """``package.layout``, or with auto fused where the kind's three steps fit one python model
        (``fusable``, on a python runtime) and ensemble otherwise.  FastDeploy's uie (api fastdeploy) is one
        python model: fused (serving.bundle.fastdeploy_api refuses an explicit ensemble)."""
        if self.one_model(pc):
            return "fused"
        if pc.layout != "auto":
            return pc.layout
        return "fused" if self.fusable and pc.backend == "python" else "ensemble"

    # -- files ----------------------------------------------------------------------------------------------------
    def fused_model(self, pc: PackageConfig) -> str | None:
        """The python model (in ``models``) of layout fused for these package settings."""
        return self.files.fused

    def tokenizer_helpers(self, pc: PackageConfig) -> list[Path]:
        """Helpers the pre-processing model loads beside it (serving/triton's ``text_input.py`` always goes)."""
        return []

    def postprocess_helpers(self, pc: PackageConfig) -> list[Path]:
        """Helpers the post-processing model loads beside it: FastDeploy's payloads (token
        classification rows, UIE results) with package.api fastdeploy."""
        return [Path(fastdeploy_payloads.__file__)] if pc.api == fd.API else []

    def label_problem(self, rows: list[str]) -> str | None:
        """What is wrong with labels.json's rows for the served post-processing (see the export contract)."""
        try:
            names = [str(json.loads(line)["label"]) for line in rows]
        except (json.JSONDecodeError, KeyError, TypeError):
            return "rows must be JSON objects with a 'label'"
        return self.tag_problem(names)

    def tag_problem(self, names: list[str]) -> str | None:
        return None

    # -- serving settings -----------------------------------------------------------------------------------------
    def serving_defaults(self, pc: PackageConfig) -> tuple[PackageConfig, str | None]:
        """(package config, why) for a bundle make tune has not measured here, when the config left instances and
        threads to be chosen: ``pc`` as it is (None) unless the kind knows better."""
        return pc, None

    # -- meta.json ------------------------------------------------------------------------------------------------
    def meta_problem(self, meta: dict) -> str | None:
        """What is wrong with meta.json's settings of this kind (None: nothing; the contract checked the rest)."""
        return None

    def meta_sections(self, meta: dict) -> dict[str, Any]:
        """The meta.json sections bundle.json carries for this kind (what the tools window and decode with)."""
        return {self.meta_section: meta[self.meta_section]} if self.meta_section else {}

    def shape_fields(self, meta: dict) -> dict[str, Any]:
        """The kind's own settings from meta.json that its Triton configs read (``BundleShape.settings``)."""
        return {}

    # -- Triton configs -------------------------------------------------------------------------------------------
    def configs(self, shape: BundleShape, pc: PackageConfig) -> tuple | None:
        if self.layout(pc) == "fused":
            return self.fused_configs(shape, pc)
        return self.ensemble_configs(shape, pc)

    def fused_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple | None:
        """The one model of layout fused; None: the kind has no fused form (``all_configs`` refuses the layout)."""
        return None

    def ensemble_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        raise NotImplementedError

    # -- model card -----------------------------------------------------------------------------------------------
    def card_lines(self, names: ModelNames, pc: PackageConfig, meta: dict, model_line: str, batching: str,
                   choice) -> list[str]:
        """The "What it is" lines of the model card (``model_line``, ``batching``: the shared ones)."""
        raise NotImplementedError

    def fastdeploy_card_lines(self, names: ModelNames, pc: PackageConfig, meta: dict, engine: str) -> list[str]:
        """The "What it is" lines of a package.api fastdeploy bundle (FastDeploy's ERNIE 3.0 example interface)."""
        kind = "ensemble" if not names.fused else f"python, runtime `{pc.runtime}`, layout fused"
        return [f"- `{names.ensemble}` ({kind}; FastDeploy's ERNIE 3.0 serving interface): {self.fastdeploy.io}.",
                f"- Models: `{names.tokenizer}` (WordPiece, max_seq_len {meta['max_seq_len']}), `{names.model}` ({engine}), "
                f"`{names.postprocess}`." if not names.fused else f"- Inside: WordPiece, {engine}, {self.post_steps}.",
                f"- Batching: max_batch_size {pc.max_batch_size}; {pc.instances} {pc.device} instance(s) per model."]


@dataclasses.dataclass(frozen=True)
class WindowedCard:
    """A windowed kind's model card, in its own words (``WindowedKind.card_lines`` lays them out)."""

    io: str  # the ensemble's inputs -> outputs
    items: str  # what a request carries N of: "questions", "texts"
    windowing: str  # what the pre-processing does, with its settings
    post_step: str  # the post-processing in a few words: "answer picking"
    decoding: str  # what the post-processing does, with its settings


class WindowedKind(BundleKind):
    """Reading comprehension and UIE: an item becomes a varying number of windows (max_batch_size 0 everywhere,
    model_config.windowed_package), and the model answers start/end logits per token."""

    # meta_section's positive integers: doc_stride, the first segment's length (question, prompt), then the decoding's
    meta_keys: tuple[str, ...]
    inputs: tuple[str, ...]  # the ensemble's string inputs, [N] each: the first segment's, the context's
    to_post: tuple[str, ...]  # the inputs the post-processing reads too (the passage; the texts and prompts)
    requests_helper: str  # the request checks (in ``models``) its pre-processing, post-processing and fused models share

    def outputs(self, pc0: PackageConfig) -> list[mc.ModelOutput]:
        """The ensemble's outputs (``pc0``: ``model_config.windowed_package``'s settings)."""
        raise NotImplementedError

    def decode_params(self, shape: BundleShape) -> dict[str, Any]:
        """The post-processing's decoding settings (Triton config parameters)."""
        raise NotImplementedError

    def shape_fields(self, meta: dict) -> dict[str, Any]:
        section = meta.get(self.meta_section, {})
        return {key: int(section.get(key, 0)) for key in self.meta_keys}

    def tokenizer_helpers(self, pc: PackageConfig) -> list[Path]:
        return [self.models / self.requests_helper]  # the request checks, shared with the fused model

    def postprocess_helpers(self, pc: PackageConfig) -> list[Path]:
        return [self.models / self.requests_helper, *super().postprocess_helpers(pc)]  # the answers

    def ensemble_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        """The ensemble, the windowing tokenizer, the model and the post-processing (serving/bundle/model_config.py's
        windowed pieces)."""
        pc0, first = mcfg.windowed_package(pc), self.meta_keys[1]
        return (mcfg.windowed_ensemble_config(shape, pc, self.inputs, self.to_post, self.outputs(pc0)),
                mcfg.windowing_tokenizer_config(shape, pc, self.inputs, {first: shape.settings[first]}),
                mcfg.model_config(shape, pc0, self.token_level),
                mcfg.windowed_postprocess_config(shape, pc, self.to_post, self.outputs(pc0), self.decode_params(shape)))

    def fused_configs(self, shape: BundleShape, pc: PackageConfig) -> tuple:
        return (self.fused_config(shape, pc),)

    def fused_config(self, shape: BundleShape, pc: PackageConfig) -> mc.ModelConfig:
        """package.layout fused: the ensemble's inputs and outputs on one python model (``files.fused``) that
        windows, runs the engine in-process and decodes; max_batch_size 0 as the ensemble's (windows per item vary)."""
        pc0 = mcfg.windowed_package(pc)
        cfg = mc.ModelConfig(name=ModelNames(shape.task, fused=True).ensemble, backend="python")
        cfg.input.extend([mcfg.input_tensor(name, mc.TYPE_STRING, [], pc0) for name in self.inputs])
        cfg.output.extend(self.outputs(pc0))
        mcfg.schedule(cfg, pc0)
        self.all_steps(cfg, shape, pc)
        return cfg

    def all_steps(self, cfg: mc.ModelConfig, shape: BundleShape, pc: PackageConfig) -> None:
        """The parameters of a model that runs all three steps: the engine's, the windowing's and the decoding's."""
        mcfg.fused_steps(cfg, shape, pc)
        first = self.meta_keys[1]
        for key, value in {"doc_stride": shape.settings["doc_stride"], first: shape.settings[first],
                           **self.decode_params(shape),
                           "max_items": pc.max_batch_size}.items():  # items per request; 0: no limit
            mcfg.param(cfg, key, value)

    def meta_problem(self, meta: dict) -> str | None:
        """The served pre/post-processing windows and decodes with meta.json's section: its integers positive, and
        the first segment (question, prompt: ``meta_keys[1]``) leaving room for context in max_seq_len."""
        section, keys = self.meta_section, self.meta_keys
        values = meta.get(section)
        if not isinstance(values, dict):
            return f"field {section!r} ({', '.join(keys)}) missing"
        for key in keys:
            if isinstance(values.get(key), bool) or not isinstance(values.get(key), int) or values[key] < 1:
                return f"{section}.{key} must be a positive integer, got {values.get(key)!r}"
        if values[keys[1]] + 3 >= meta["max_seq_len"]:
            return f"{section}.{keys[1]} {values[keys[1]]} leaves no room for context in max_seq_len {meta['max_seq_len']}"
        return None

    def card_lines(self, names: ModelNames, pc: PackageConfig, meta: dict, model_line: str, batching: str,
                   choice) -> list[str]:
        """Fused: one python model windows, runs the model on all of a request's windows at once and decodes; else the
        ensemble's windowing tokenizer, model and post-processing.  The kind's words come from ``card``."""
        c = self.card(meta)
        if self.layout(pc) == "fused":
            return [f"- `{names.ensemble}` (python backend, runtime `{pc.runtime}`, layout fused: windowing, model and "
                    f"{c.post_step} in one process): {c.io}",
                    f"- Inside: {c.windowing}, the {choice.precision} model from `{choice.form}` on all of a request's "
                    f"windows in one call, {c.decoding}.",
                    self.batching_line(pc, c.items, fused=True)]
        return [f"- Ensemble `{names.ensemble}`: {c.io}", f"- `{names.tokenizer}` (python): {c.windowing}.", model_line,
                f"- `{names.postprocess}` (python): {c.decoding}.", self.batching_line(pc, c.items, fused=False)]

    def card(self, meta: dict) -> "WindowedCard":
        """What the model card says of this kind's interface and steps, from meta.json's settings."""
        raise NotImplementedError

    def batching_line(self, pc: PackageConfig, items: str, fused: bool) -> str:
        """The model card's batching line: nothing batched by Triton; ``items`` per request, instances."""
        return (f"- Batching: none by Triton (max_batch_size 0: windows per request vary); up to "
                f"{pc.max_batch_size or 'any number of'} {items} per request, {pc.instances} {pc.device} instance(s)"
                f"{'' if fused else ' per model'}.")

    def serving_defaults(self, pc: PackageConfig) -> tuple[PackageConfig, str | None]:
        """Two instances with every core each, on CPU with an engine whose one request uses every core (OpenVINO).
        Nothing batches whole requests, so at one instance each request's python (windowing, decoding, the
        hand-offs) runs while the engine waits; a second instance runs its engine meanwhile.  Every make tune of a
        windowed bundle chose this (CMRC2018 on Intel: 1.29x at c16, level at c1; UIE fused and ensemble on AMD:
        1.11x and 1.09x at c16, level at c1; MEASUREMENTS.md), and two instances x one thread lost c1 by 0.6x."""
        if pc.instance_count or pc.threads or pc.device != "CPU" or not pc.engine_takes_every_core:
            return pc, None
        cores = pc.engine_threads  # one instance's: every core
        return (dataclasses.replace(pc, instance_count=2, threads=cores),
                f"{self.name}: 2 instances x {cores} threads (whole requests: one instance's python overlaps the "
                "other's engine)")

    def tag_problem(self, names: list[str]) -> str | None:
        if names != ["start", "end"]:
            return f"{self.name} needs the two rows 'start', 'end', got {names[:5]}"
        return None
