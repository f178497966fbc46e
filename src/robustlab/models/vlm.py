"""``vlm:PATH``: a transformers image-text-to-text model loaded from a local folder.

The folder is what ``save_pretrained`` writes for the model and its processor (LLaVA-style
first: ``LlavaForConditionalGeneration`` + its processor). Nothing is downloaded. Two ways
of answering a question about an image:

- :meth:`VLM.sample`: free text sampled at a temperature from a ``torch.Generator``
  seeded by the caller (the paper's protocol, made reproducible): ImageNet-D's
  ``eval_imagenet_d.py`` calls ``generate(do_sample=True, temperature=0.2)``, so the
  transformers defaults it ran with also apply (top-k 50, top-p 1.0) unless the
  checkpoint's ``generation_config.json`` sets them.
- :meth:`VLM.option_logprobs`: the model's log-likelihood of each option written as the
  answer (deterministic; no parsing of free text).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from robustlab.errors import InputError, MissingResourceError

WEIGHT_SUFFIXES = (".safetensors", ".bin")
# transformers' sampling defaults when ImageNet-D's results were made (4.x): what
# ``generate(do_sample=True, temperature=0.2)`` used unless the checkpoint said otherwise.
DEFAULT_TOP_K = 50
DEFAULT_TOP_P = 1.0


@dataclass(frozen=True)
class Conversation:
    """One of LLaVA's conversation templates (``llava/conversation.py``), as data.

    Only what a single question needs: the system prompt, the two roles, the separators
    and the style that joins them. :meth:`prompt` writes the user turn (``<image>``, a
    newline, the question) and leaves the assistant's turn open, as ImageNet-D's
    ``eval_imagenet_d.py`` does with ``append_message(roles[1], None)``.
    """

    system: str
    roles: tuple[str, str]
    style: str  # "two", "single", "llama_2" or "mpt" (LLaVA's SeparatorStyle)
    sep: str
    sep2: str = ""

    def prompt(self, question: str) -> str:
        msg = "<image>\n" + question
        user, assistant = self.roles
        if self.style in ("two", "single"):
            return f"{self.system}{self.sep}{user}: {msg}{self.sep}{assistant}:"
        if self.style == "mpt":
            return f"{self.system}{self.sep}{user}{msg}{self.sep}{assistant}"
        if self.style == "llama_2":
            if self.system:
                msg = f"<<SYS>>\n{self.system}\n<</SYS>>\n\n{msg}"
            text = f"{self.sep}[INST] {msg} [/INST]"
            return text.lstrip(self.sep) if self.sep else text
        raise ValueError(f"unknown conversation style {self.style!r}")


_HUMAN = (
    "A chat between a curious human and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the human's questions."
)
# LLaVA's templates that ImageNet-D's evaluation script can pick (its conv_mode rule).
CONVERSATIONS: dict[str, Conversation] = {
    "llava_v1": Conversation(_HUMAN, ("USER", "ASSISTANT"), "two", " ", "</s>"),
    "llava_v0": Conversation(_HUMAN, ("Human", "Assistant"), "single", "###"),
    "llava_llama_2": Conversation(
        "You are a helpful language and vision assistant. You are able to understand the "
        "visual content that the user provides, and assist the user with a variety of tasks "
        "using natural language.",
        ("USER", "ASSISTANT"),
        "llama_2",
        "<s>",
        "</s>",
    ),
    "mistral_instruct": Conversation("", ("USER", "ASSISTANT"), "llama_2", "", "</s>"),
    "chatml_direct": Conversation(
        "<|im_start|>system\nAnswer the questions.",
        ("<|im_start|>user\n", "<|im_start|>assistant\n"),
        "mpt",
        "<|im_end|>",
    ),
    "mpt": Conversation(
        "<|im_start|>system\nA conversation between a user and an LLM-based AI assistant. "
        "The assistant gives helpful and honest answers.",
        ("<|im_start|>user\n", "<|im_start|>assistant\n"),
        "mpt",
        "<|im_end|>",
    ),
}
CHAT_TEMPLATE = "chat_template"
# transformers model types of the LLaVA family (their conversions of LLaVA checkpoints).
LLAVA_TYPES = ("llava", "llava_next")


def official_conversation(name: str, model_type: str | None) -> str | None:
    """The template ImageNet-D's ``eval_imagenet_d.py`` picks for a model, else None.

    Its rule reads the model's folder name: ``llama-2``, ``mistral``, ``v1.6-34b``, ``v1``,
    ``mpt`` in that order, else ``llava_v0``. transformers' conversions drop the "v" from
    their names (``llava-1.5-7b-hf``), so for a LLaVA-family model whose name matches
    nothing the template of LLaVA-1.5 (``llava_v1``) is used instead of ``llava_v0``; a
    model outside the family has no ImageNet-D template (None).
    """
    if model_type not in LLAVA_TYPES:
        return None
    low = name.lower()
    for key, conv in (
        ("llama-2", "llava_llama_2"),
        ("mistral", "mistral_instruct"),
        ("v1.6-34b", "chatml_direct"),
        ("v1", "llava_v1"),
        ("mpt", "mpt"),
    ):
        if key in low:
            return conv
    return "llava_v1"


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
    """A logits processor that samples the next token from ``generator`` and leaves only
    that token possible, so greedy ``generate`` emits it. ``generate`` draws from torch's
    global RNG; this keeps each image's draws on its own generator.

    The distribution is transformers' sampling one, in its order: scores divided by
    ``temperature``, then only tokens scoring at least the ``top_k``-th best kept (ties
    kept), then, for ``top_p`` < 1, the smallest set of best tokens whose probability
    reaches ``top_p`` (at least one token).
    """

    def __init__(self, temperature: float, generator, top_k: int = 0, top_p: float = 1.0):
        self.temperature = float(temperature)
        self.generator = generator
        self.top_k = int(top_k or 0)
        self.top_p = float(top_p)

    def probabilities(self, scores):
        """The sampling distribution over the vocabulary (rows of ``scores``)."""
        import torch

        x = scores.float() / self.temperature
        if self.top_k > 0:
            k = min(self.top_k, x.shape[-1])
            kth = torch.topk(x, k, dim=-1).values[..., -1:]
            x = x.masked_fill(x < kth, float("-inf"))
        if self.top_p < 1.0:
            ordered, idx = torch.sort(x, descending=False, dim=-1)
            cum = ordered.softmax(dim=-1).cumsum(dim=-1)
            drop = cum <= (1 - self.top_p)
            drop[..., -1:] = False
            x = x.masked_fill(drop.scatter(-1, idx, drop), float("-inf"))
        return torch.softmax(x, dim=-1)

    def __call__(self, input_ids, scores):
        import torch

        probs = self.probabilities(scores)
        picked = torch.multinomial(probs.cpu(), 1, generator=self.generator).to(scores.device)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter(1, picked, 0.0)


class VLM:
    """A loaded image-text-to-text model and its processor.

    Attributes:
        spec: ``vlm:PATH`` as given.
        fingerprint: Hash of config and weights (:func:`fingerprint`).
        prompt_format: A :data:`CONVERSATIONS` key (ImageNet-D's template for the model's
            family, :func:`official_conversation`), or ``"chat_template"`` (the
            processor's own: a model ImageNet-D has no template for).
        top_k, top_p: The sampling filters (:data:`DEFAULT_TOP_K`, :data:`DEFAULT_TOP_P`
            unless the checkpoint's generation config sets them).
    """

    def __init__(
        self,
        spec: str,
        model,
        processor,
        *,
        fingerprint: str,
        device: str,
        prompt_format: str | None = None,
    ):
        self.spec = spec
        self.model = model
        self.processor = processor
        self.fingerprint = fingerprint
        self.device = device
        if prompt_format is None:
            name = Path(spec.split(":", 1)[1] if spec.startswith("vlm:") else spec).name
            prompt_format = official_conversation(
                name, getattr(model.config, "model_type", None)
            ) or (CHAT_TEMPLATE if getattr(processor, "chat_template", None) else "llava_v1")
        if prompt_format != CHAT_TEMPLATE and prompt_format not in CONVERSATIONS:
            raise InputError(
                f"unknown conversation template {prompt_format!r}; templates are "
                f"{', '.join([*CONVERSATIONS, CHAT_TEMPLATE])}"
            )
        self.prompt_format = prompt_format
        gen = getattr(model, "generation_config", None)
        top_k, top_p = getattr(gen, "top_k", None), getattr(gen, "top_p", None)
        self.top_k = int(DEFAULT_TOP_K if top_k is None else top_k)
        self.top_p = float(DEFAULT_TOP_P if top_p is None else top_p)

    def describe(self) -> dict:
        return {
            "spec": self.spec,
            "fingerprint": self.fingerprint,
            "architecture": type(self.model).__name__,
            "prompt_format": self.prompt_format,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "dtype": str(self.model.dtype),
            "device": self.device,
        }

    def prompt(self, question: str) -> str:
        """The full text sent with the image: the template's system prompt, the user turn
        holding the image and the question, then the assistant's turn left open."""
        if self.prompt_format == CHAT_TEMPLATE:
            messages = [
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}
            ]
            return self.processor.apply_chat_template(messages, add_generation_prompt=True)
        return CONVERSATIONS[self.prompt_format].prompt(question)

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
        """Free-text answer sampled at ``temperature`` (then top-k, top-p: :class:`_SampleWith`)
        from a generator seeded by ``seed``."""
        import torch

        enc = self._encode(image, self.prompt(question))
        gen = torch.Generator().manual_seed(int(seed) & (2**63 - 1))
        tok = self.processor.tokenizer
        with torch.inference_mode():
            out = self.model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=int(max_new_tokens),
                logits_processor=[_SampleWith(temperature, gen, self.top_k, self.top_p)],
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


def load_vlm(spec: str, *, device: str | None = None, prompt_format: str | None = None) -> VLM:
    """Load ``vlm:PATH`` (or a bare PATH) from a local folder; never downloads.

    ``prompt_format``: a :data:`CONVERSATIONS` key or ``"chat_template"`` (default: the
    template ImageNet-D uses for the model's family, see :func:`official_conversation`).

    Raises:
        MissingResourceError: the folder does not exist.
        InputError: it is not a transformers image-text-to-text model with its processor.
    """
    from robustlab.models.devices import auto_device

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
        f"vlm:{path}",
        model.eval().to(dev),
        processor,
        fingerprint=fingerprint(path),
        device=dev,
        prompt_format=prompt_format,
    )
