"""Prompts around a document, built at the token level so a document is tokenized once and can be cut."""
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from core.documents import DocumentError

_SLOT = "\u2063DOCFLASH_DOCUMENT\u2063"


def encode_text(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of `text` alone (no special tokens, no length warning: documents are long on purpose)."""
    return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]


class DocumentPrompt:
    """`before` + document + `after`, in the tokenizer's chat template when it has one.

    With a chat template the text is the user turn and the ids end with the assistant's generation prompt;
    without one, the tokenizer's BOS token (if any) starts the ids.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, before: str, after: str):
        self.tokenizer = tokenizer
        self.before = before
        self.after = after
        prefix, suffix = self._render([{"role": "user", "content": f"{before}{_SLOT}{after}"}]).split(_SLOT)
        self.prefix_ids = self._bos() + encode_text(tokenizer, prefix)
        self.suffix_ids = encode_text(tokenizer, suffix)
        self._suffix_text = suffix

    def _bos(self) -> list[int]:
        if self.tokenizer.chat_template or self.tokenizer.bos_token_id is None:
            return []
        return [self.tokenizer.bos_token_id]

    def _render(self, messages: list[dict]) -> str:
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return "".join(message["content"] for message in messages)

    @property
    def overhead(self) -> int:
        """Tokens the prompt adds around the document."""
        return len(self.prefix_ids) + len(self.suffix_ids)

    def render(self, document_ids: Sequence[int]) -> list[int]:
        """The full prompt ids around `document_ids`."""
        return [*self.prefix_ids, *document_ids, *self.suffix_ids]

    def followup_ids(self, answer: str, message: str) -> list[int]:
        """Ids that continue a rendered prompt with the model's `answer` and a new user `message`."""
        if self.tokenizer.chat_template:
            conversation = self._render([
                {"role": "user", "content": f"{self.before}{_SLOT}{self.after}"},
                {"role": "assistant", "content": answer},
                {"role": "user", "content": message},
            ])
            tail = conversation.split(_SLOT, 1)[1]
            if tail.startswith(self._suffix_text):
                return encode_text(self.tokenizer, tail[len(self._suffix_text):])
        return encode_text(self.tokenizer, f"{answer}\n\n{message}\n")


def document_room(max_context: int, prompt: DocumentPrompt, reserve: int) -> int:
    """Document tokens that fit in the context next to `prompt` and `reserve` more tokens (answer, labels)."""
    room = max_context - prompt.overhead - reserve
    if room < 1:
        raise DocumentError(
            f"the prompt and {reserve} reserved tokens leave no room for the document in the model's context "
            f"of {max_context} tokens"
        )
    return room


def encode_document(tokenizer: PreTrainedTokenizerBase, text: str, room: int, max_context: int) -> list[int]:
    """The document's ids; a DocumentError when it has none or more than `room` (see `document_room`)."""
    ids = encode_text(tokenizer, text)
    if not ids:
        raise DocumentError("document has no tokens")
    if len(ids) > room:
        raise DocumentError(
            f"document is {len(ids)} tokens; the model's context of {max_context} tokens leaves room for {room} "
            f"with this prompt"
        )
    return ids
