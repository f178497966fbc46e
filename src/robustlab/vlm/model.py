"""``vlm:PATH``: a transformers image-text-to-text model loaded from a local folder.

The folder is what ``save_pretrained`` writes for the model and its processor (LLaVA-style
first: ``LlavaForConditionalGeneration`` + its processor). Nothing is downloaded. Two ways
of answering a question about an image:

- :meth:`VLM.sample`: free text sampled at a temperature from a ``torch.Generator``
  seeded by the caller (the paper's protocol, made reproducible).
- :meth:`VLM.option_logprobs`: the model's log-likelihood of each option written as the
  answer (deterministic; no parsing of free text).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from robustlab.errors import InputError, MissingResourceError

# Used when the processor has no chat template: LLaVA-1.5's conversation format.
FALLBACK_PROMPT = "USER: <image>\n{question} ASSISTANT:"
WEIGHT_SUFFIXES = (".safetensors", ".bin")


def fingerprint(folder: Path) -> str:
    """First 16 hex digits of a SHA-256 over the folder's config and weight files (names and
    bytes), so two checkpoints of one architecture never read as the same model."""
    h = hashlib.sha256()
    files = sorted(
        p
        for p in folder.iterdir()
        if p.is_file() and (p.suffix in WEIGHT_SUFFIXES or p.name == "config.json")
    )
    for p in files:
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


class _SampleWith:
    """A logits processor that samples the next token at ``temperature`` from ``generator``
    and leaves only that token possible, so greedy ``generate`` emits it. ``generate``
    draws from torch's global RNG; this keeps each image's draws on its own generator."""

    def __init__(self, temperature: float, generator):
        self.temperature = float(temperature)
        self.generator = generator

    def __call__(self, input_ids, scores):
        import torch

        probs = torch.softmax(scores.float() / self.temperature, dim=-1)
        picked = torch.multinomial(probs.cpu(), 1, generator=self.generator).to(scores.device)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter(1, picked, 0.0)


class VLM:
    """A loaded image-text-to-text model and its processor.

    Attributes:
        spec: ``vlm:PATH`` as given.
        fingerprint: Hash of config and weights (:func:`fingerprint`).
        prompt_format: ``"chat_template"`` or ``"llava-1.5 fallback"``.
    """

    def __init__(self, spec: str, model, processor, *, fingerprint: str, device: str):
        self.spec = spec
        self.model = model
        self.processor = processor
        self.fingerprint = fingerprint
        self.device = device
        self.prompt_format = (
            "chat_template" if getattr(processor, "chat_template", None) else "llava-1.5 fallback"
        )

    def describe(self) -> dict:
        return {
            "spec": self.spec,
            "fingerprint": self.fingerprint,
            "architecture": type(self.model).__name__,
            "prompt_format": self.prompt_format,
            "dtype": str(self.model.dtype),
            "device": self.device,
        }

    def prompt(self, question: str) -> str:
        """The full text sent with the image: the user turn holding the image and the
        question, then the assistant's turn left open."""
        if self.prompt_format == "chat_template":
            messages = [
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}
            ]
            return self.processor.apply_chat_template(messages, add_generation_prompt=True)
        return FALLBACK_PROMPT.format(question=question)

    def _encode(self, image, text: str):
        enc = self.processor(images=image, text=text, return_tensors="pt")
        return {
            k: (v.to(self.device, self.model.dtype) if k == "pixel_values" else v.to(self.device))
            for k, v in enc.items()
        }

    def sample(
        self,
        image,
        question: str,
        *,
        seed: int,
        temperature: float = 0.2,
        max_new_tokens: int = 512,
    ) -> str:
        """Free-text answer sampled at ``temperature`` from a generator seeded by ``seed``."""
        import torch

        enc = self._encode(image, self.prompt(question))
        gen = torch.Generator().manual_seed(int(seed) & (2**63 - 1))
        tok = self.processor.tokenizer
        with torch.inference_mode():
            out = self.model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=int(max_new_tokens),
                logits_processor=[_SampleWith(temperature, gen)],
                pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
            )
        new = out[0, enc["input_ids"].shape[1] :]
        return tok.decode(new, skip_special_tokens=True).strip()

    def option_logprobs(self, image, question: str, options) -> list[float]:
        """Log-likelihood of each option as the whole answer: the sum of the log
        probabilities of its tokens after the prompt (written `` option`` after it)."""
        import torch

        prompt = self.prompt(question)
        base = self._encode(image, prompt)
        n = base["input_ids"].shape[1]
        scores = []
        with torch.inference_mode():
            for opt in options:
                enc = self._encode(image, f"{prompt} {opt}")
                ids = enc["input_ids"]
                if ids.shape[1] <= n or not torch.equal(ids[0, :n], base["input_ids"][0]):
                    raise InputError(
                        f"{self.spec}: the tokenizer does not keep the prompt's "
                        f"tokens when the answer {opt!r} follows it"
                    )
                logits = self.model(**enc).logits[0].float()
                logp = torch.log_softmax(logits[n - 1 : -1], dim=-1)
                scores.append(float(logp.gather(1, ids[0, n:, None]).sum()))
        return scores


def load_vlm(spec: str, *, device: str | None = None) -> VLM:
    """Load ``vlm:PATH`` (or a bare PATH) from a local folder; never downloads.

    Raises:
        MissingResourceError: the folder does not exist.
        InputError: it is not a transformers image-text-to-text model with its processor.
    """
    from robustlab.models.base import auto_device

    path = Path(spec.split(":", 1)[1] if spec.startswith("vlm:") else spec).expanduser()
    if not path.is_dir():
        raise MissingResourceError(
            f"vlm: model folder {path} does not exist",
            hint="pass vlm:PATH, a folder written by save_pretrained",
        )
    expected = (
        "expected a transformers image-text-to-text folder (e.g. a LLaVA model and "
        "processor saved with save_pretrained)"
    )
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise InputError(f"vlm:{path} has no config.json; {expected}")
    try:
        model_type = json.loads(cfg_file.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError) as exc:
        raise InputError(
            f"vlm:{path}/config.json is not readable JSON ({exc}); {expected}"
        ) from None
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    if model_type not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        raise InputError(f"vlm:{path} is a {model_type or 'untyped'!s} model; {expected}")
    dev = auto_device(device)
    dtype = torch.float16 if dev.startswith("cuda") else torch.float32
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        processor = AutoProcessor.from_pretrained(path, local_files_only=True)
        model = AutoModelForImageTextToText.from_pretrained(
            path, config=config, dtype=dtype, local_files_only=True
        )
    except Exception as exc:  # noqa: BLE001 - missing weights, processor, tokenizer files
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise InputError(f"cannot load vlm:{path}: {text}; {expected}") from None
    if not hasattr(processor, "tokenizer") or not hasattr(processor, "image_processor"):
        raise InputError(f"vlm:{path} has no image processor and tokenizer; {expected}")
    return VLM(
        f"vlm:{path}", model.eval().to(dev), processor, fingerprint=fingerprint(path), device=dev
    )
