"""The Blueprint class of the JSON API: validation errors answer 400 (D2), not webargs' 422."""
from flask_smorest import Blueprint
from flask_smorest.arguments import ArgumentsMixin


class Parser(type(ArgumentsMixin.ARGUMENTS_PARSER)):
    DEFAULT_VALIDATION_STATUS = 400


class ApiBlueprint(Blueprint):
    ARGUMENTS_PARSER = Parser()
